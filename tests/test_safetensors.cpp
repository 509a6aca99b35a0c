// Safetensors parsing: well-formed files map and parse; every kind of malformed file is rejected with a
// message that names the file and the specific problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/helpers/error_of.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/helpers/tiny_model.h"

namespace mk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

using test::error_of;

// A raw safetensors image: length prefix, header text as given (need not be valid JSON), data bytes.
std::vector<uint8_t> image_text(const std::string& header, size_t data_bytes, uint64_t length_prefix) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes);
  for (size_t i = 0; i < 8; ++i) out[i] = uint8_t(length_prefix >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) out[8 + header.size() + i] = uint8_t(i);
  return out;
}
std::vector<uint8_t> image_text(const std::string& header, size_t data_bytes) {
  return image_text(header, data_bytes, header.size());
}
std::vector<uint8_t> image(const json& header, size_t data_bytes) { return image_text(header.dump(), data_bytes); }

json entry(const std::string& dtype, std::vector<int64_t> shape, uint64_t begin, uint64_t end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("safetensors"); }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::vector<uint8_t>& bytes, const std::string& name = "bad.safetensors") {
    fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return path;
  }

  // Opens `bytes` as a file and returns the error; checks that it names the file.
  std::string open_error(const std::vector<uint8_t>& bytes) {
    fs::path path = write(bytes);
    std::string msg = error_of([&] { SafetensorsFile::open(path); });
    EXPECT_THAT(msg, HasSubstr(path.string()));
    return msg;
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, ReadsWellFormedFile) {
  std::vector<test::TensorBytes> tensors = {
      {"a", "F32", {2, 3}, test::encode({1, 2, 3, 4, 5, 6}, DType::F32)},
      {"b", "BF16", {4}, test::encode({1, -1, 0.5f, 2}, DType::BF16)},
  };
  fs::path path = dir_ / "ok.safetensors";
  test::write_safetensors(path, tensors);

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.file->size(), fs::file_size(path));
  EXPECT_EQ(f.file->path(), path);
  ASSERT_EQ(f.header.tensors.size(), 2u);
  for (const auto& t : tensors) {
    const SafetensorsEntry& e = f.header.tensors.at(t.name);
    EXPECT_EQ(e.name, t.name);
    EXPECT_EQ(e.dtype, t.dtype);
    EXPECT_EQ(e.shape, t.shape);
    EXPECT_EQ(e.end - e.begin, t.bytes.size());
    EXPECT_EQ(std::memcmp(e.data, t.bytes.data(), t.bytes.size()), 0) << t.name;
  }
  EXPECT_EQ(f.header.metadata.at("format"), "pt");
}

TEST_F(SafetensorsTest, AcceptsEveryKnownDtypeAndEmptyTensors) {
  json h = json::object();
  uint64_t at = 0;
  for (auto [dtype, size] : std::vector<std::pair<std::string, uint64_t>>{
           {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
           {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}}) {
    h[dtype] = entry(dtype, {3}, at, at + 3 * size);
    at += 3 * size;
  }
  h["empty"] = entry("F32", {0, 7}, at, at);  // zero elements: occupies no bytes, overlaps nothing
  h["scalar"] = entry("F32", {}, at, at + 4);  // rank 0: one element
  auto bytes = image(h, at + 4);
  SafetensorsHeader parsed = parse_safetensors(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(parsed.tensors.size(), 14u);
  EXPECT_EQ(parsed.tensors.at("scalar").shape.size(), 0u);
  EXPECT_TRUE(parsed.metadata.empty());
}

TEST_F(SafetensorsTest, EmptyFileIsMappedAndRejected) {
  fs::path path = write({}, "empty.safetensors");
  auto mapped = MappedFile::open(path);
  EXPECT_EQ(mapped->size(), 0u);
  std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_THAT(msg, HasSubstr(path.string()));
  EXPECT_THAT(msg, HasSubstr("0 bytes"));
}

TEST_F(SafetensorsTest, MissingFile) {
  fs::path path = dir_ / "nope.safetensors";
  std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_THAT(msg, HasSubstr(path.string()));
  EXPECT_THAT(msg, HasSubstr("No such file"));
}

TEST_F(SafetensorsTest, DirectoryIsNotAFile) {
  std::string msg = error_of([&] { MappedFile::open(dir_); });
  EXPECT_THAT(msg, HasSubstr(dir_.string()));
  EXPECT_THAT(msg, HasSubstr("not a regular file"));
}

TEST_F(SafetensorsTest, ShorterThanLengthPrefix) {
  EXPECT_THAT(open_error({1, 2, 3}), HasSubstr("file is 3 bytes"));
}

TEST_F(SafetensorsTest, HeaderLengthPastEnd) {
  std::string msg = open_error(image_text("{}", 0, 1000));
  EXPECT_THAT(msg, HasSubstr("header length 1000"));
  EXPECT_THAT(msg, HasSubstr("(10 bytes)"));
}

TEST_F(SafetensorsTest, HeaderLengthThatWouldOverflow) {
  EXPECT_THAT(open_error(image_text("{}", 0, ~uint64_t(0))), HasSubstr("header length 18446744073709551615"));
}

TEST_F(SafetensorsTest, MalformedJsonHeader) {
  std::string msg = open_error(image_text(R"({"a": {"dtype": "F32",)", 0));
  EXPECT_THAT(msg, HasSubstr("not valid JSON"));
  EXPECT_THAT(msg, HasSubstr("parse error"));  // nlohmann's own description follows
}

TEST_F(SafetensorsTest, NumberTooLargeForJson) {
  // nlohmann reports this as out_of_range rather than parse_error: found by the fuzzer.
  std::string msg = open_error(image_text(R"({"t": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 4]}})", 4));
  EXPECT_THAT(msg, HasSubstr("not valid JSON"));
  EXPECT_THAT(msg, HasSubstr("number overflow"));
}

TEST_F(SafetensorsTest, HeaderNotAnObject) {
  EXPECT_THAT(open_error(image(json::array({1, 2}), 0)), HasSubstr("must be a JSON object, found an array"));
}

TEST_F(SafetensorsTest, TruncatedDataRegion) {
  fs::path path = dir_ / "cut.safetensors";
  test::write_safetensors(path, {{"w", "F32", {4, 4}, test::encode(std::vector<float>(16, 1.0f), DType::F32)}});
  fs::resize_file(path, fs::file_size(path) - 10);  // cut inside the data region
  std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_THAT(msg, HasSubstr(path.string()));
  EXPECT_THAT(msg, HasSubstr("tensor 'w': data_offsets [0, 64] run past the end of the data region (54 bytes)"));
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
  json h = {{"first", entry("F32", {4}, 0, 16)}, {"second", entry("F32", {2}, 8, 16)}};
  std::string msg = open_error(image(h, 16));
  EXPECT_THAT(msg, HasSubstr("'first' [0, 16] and 'second' [8, 16] overlap"));
}

TEST_F(SafetensorsTest, TensorInsideAnother) {
  // "big" covers [0, 64); "small" [4, 8) and "late" [32, 36) both lie inside it: the first is reported.
  json h = {{"big", entry("U8", {64}, 0, 64)}, {"small", entry("U8", {4}, 4, 8)}, {"late", entry("U8", {4}, 32, 36)}};
  EXPECT_THAT(open_error(image(h, 64)), HasSubstr("'big' [0, 64] and 'small' [4, 8] overlap"));
}

TEST_F(SafetensorsTest, AdjacentTensorsDoNotOverlap) {
  json h = {{"a", entry("F32", {2}, 0, 8)}, {"b", entry("F32", {2}, 8, 16)}};
  auto bytes = image(h, 16);
  EXPECT_EQ(parse_safetensors(bytes.data(), bytes.size(), "mem").tensors.size(), 2u);
}

TEST_F(SafetensorsTest, OffsetsEndBeforeBegin) {
  std::string msg = open_error(image(json{{"t", entry("F32", {1}, 8, 4)}}, 16));
  EXPECT_THAT(msg, HasSubstr("tensor 't': data_offsets [8, 4] end before they begin"));
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  std::string msg = open_error(image(json{{"t", entry("F32", {2}, 100, 108)}}, 16));
  EXPECT_THAT(msg, HasSubstr("tensor 't': data_offsets [100, 108] run past the end of the data region (16 bytes)"));
}

TEST_F(SafetensorsTest, OffsetsNotNonNegativeIntegers) {
  json h = {{"t", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {-4, 0}}}}};
  EXPECT_THAT(open_error(image(h, 8)), HasSubstr("tensor 't': data_offsets must be [begin, end] of non-negative integers, found [-4, 0]"));
  h["t"]["data_offsets"] = {0};
  EXPECT_THAT(open_error(image(h, 8)), HasSubstr("found an array of 1 elements"));
}

TEST_F(SafetensorsTest, SizeMismatch) {
  std::string msg = open_error(image(json{{"t", entry("BF16", {3, 2}, 0, 16)}}, 16));
  EXPECT_THAT(msg, HasSubstr("tensor 't': data_offsets [0, 16] span 16 bytes, but dtype BF16 and shape [3, 2] need 12"));
}

TEST_F(SafetensorsTest, UnknownDtype) {
  std::string msg = open_error(image(json{{"weird", entry("F4", {2}, 0, 1)}}, 1));
  EXPECT_THAT(msg, HasSubstr("tensor 'weird' has unknown dtype 'F4'"));
}

TEST_F(SafetensorsTest, ShapeWhoseByteSizeOverflows) {
  // 2^62 * 8 * 4 bytes wraps to 0 in 64 bits, which would "match" offsets [0, 0] without the guard.
  std::string msg = open_error(image(json{{"huge", entry("F32", {int64_t(1) << 62, 8}, 0, 0)}}, 0));
  EXPECT_THAT(msg, HasSubstr("tensor 'huge'"));
  EXPECT_THAT(msg, HasSubstr("overflows 64 bits"));
}

TEST_F(SafetensorsTest, ShapeEntriesMustBeNonNegativeIntegers) {
  EXPECT_THAT(open_error(image(json{{"t", entry("F32", {-1}, 0, 0)}}, 0)),
              HasSubstr("tensor 't': shape entries must be non-negative integers, found -1"));
  json h = {{"t", {{"dtype", "F32"}, {"shape", {1.5}}, {"data_offsets", {0, 4}}}}};
  EXPECT_THAT(open_error(image(h, 4)), HasSubstr("found 1.5"));
  h["t"]["shape"] = "2x2";
  EXPECT_THAT(open_error(image(h, 4)), HasSubstr("tensor 't': shape must be an array, found \"2x2\""));
}

TEST_F(SafetensorsTest, EntryMustBeCompleteObject) {
  EXPECT_THAT(open_error(image(json{{"t", 5}}, 0)), HasSubstr("tensor 't': entry must be an object, found 5"));
  json h = {{"t", {{"dtype", "F32"}, {"shape", {1}}}}};
  EXPECT_THAT(open_error(image(h, 4)), HasSubstr("tensor 't': entry has no 'data_offsets'"));
  h = {{"t", {{"dtype", 32}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  EXPECT_THAT(open_error(image(h, 4)), HasSubstr("tensor 't': dtype must be a string, found 32"));
}

TEST_F(SafetensorsTest, MetadataMustBeStrings) {
  EXPECT_THAT(open_error(image(json{{"__metadata__", {{"format", 1}}}}, 0)),
              HasSubstr("__metadata__ entry 'format' must be a string, found 1"));
  EXPECT_THAT(open_error(image(json{{"__metadata__", "pt"}}, 0)),
              HasSubstr("__metadata__ must be an object of strings, found \"pt\""));
}

}  // namespace
}  // namespace mk
