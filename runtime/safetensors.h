// Safetensors files: memory-mapped, with the header parsed and every entry validated up front.
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
// then the data region; offsets are relative to the data region.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mk {

// A read-only memory mapping of a whole file; unmapped on destruction.
class MappedFile {
 public:
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);  // throws mk::Error
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as written in the file: "BF16", "F16", "F32", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // offsets into the data region
  const uint8_t* data = nullptr;
};

// Parses and validates a safetensors image in memory. `source` names the file in error messages.
// Checks: header length within the buffer, valid JSON object, known dtypes, shapes of non-negative
// ints, offsets in range, end - begin == numel * dtype size, no two tensors overlapping.
struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
};
SafetensorsHeader parse_safetensors(const uint8_t* bytes, size_t size, const std::string& source);

// A mapped safetensors file with its parsed header.
struct SafetensorsFile {
  std::shared_ptr<const MappedFile> file;
  SafetensorsHeader header;
  static SafetensorsFile open(const std::filesystem::path& path);  // throws mk::Error
};

}  // namespace mk
