// Safetensors reading: the file is memory-mapped (weights are never copied through a buffer) and the
// whole header is validated before anything points into the data region, so later code can trust
// every SafetensorsEntry: its bytes exist, have the size its dtype and shape imply, and belong to it alone.
#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "runtime/error.h"

namespace mk {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------------
// MappedFile

namespace {

// Closes a file descriptor on every path out of MappedFile::open, errors included.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path) {
  FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) fail("cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) fail("cannot stat {}: {}", path.string(), std::strerror(errno));
  // mmap of a directory or a pipe fails with an unhelpful errno; say what is wrong instead.
  if (!S_ISREG(st.st_mode)) fail("cannot map {}: not a regular file", path.string());

  // The constructor is private, so make_shared cannot be used.
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = size_t(st.st_size);
  // mmap rejects a length of 0 (EINVAL); an empty file simply has no bytes, and the parser reports
  // it as too small.
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (p == MAP_FAILED) fail("cannot mmap {} ({} bytes): {}", path.string(), file->size_, std::strerror(errno));
    file->data_ = static_cast<const uint8_t*>(p);
  }
  return file;  // the mapping outlives the descriptor, which FdGuard closes now
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

// ---------------------------------------------------------------------------------------------------
// Header parsing

namespace {

// Bytes per element of every dtype the safetensors format defines; 0 for a name it does not.
// Entries of any of these parse; whether a consumer accepts the dtype is its own decision.
int safetensors_itemsize(std::string_view dtype) {
  static constexpr std::pair<std::string_view, int> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},     {"I32", 4},
      {"I16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
  };
  for (const auto& [name, size] : kSizes)
    if (name == dtype) return size;
  return 0;
}

// A short description of a JSON value for error messages. Containers are named, not dumped: a hostile
// header can nest arrays deeply enough to overflow the stack of the recursive serializer.
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::object: return "an object";
    case json::value_t::array: return fmt::format("an array of {} elements", v.size());
    case json::value_t::string: {
      std::string s = v.dump();
      return s.size() > 80 ? s.substr(0, 77) + "...\"" : s;
    }
    default: return v.dump();  // a number, boolean or null: short
  }
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | p[i];
  return n;
}

json parse_header_json(const uint8_t* text, size_t length, const std::string& source) {
  try {
    return json::parse(text, text + length);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    fail("{}: the safetensors header ({} bytes) is not valid JSON: {}", source, length, e.what());
  }
}

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& source) {
  if (!value.is_object()) fail("{}: __metadata__ must be an object of strings, found {}", source, describe(value));
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      fail("{}: __metadata__ entry '{}' must be a string, found {}", source, key, describe(v));
    out.emplace(key, v.get<std::string>());
  }
  return out;
}

// A JSON number that is a non-negative integer, as uint64. nlohmann stores non-negative integers as
// unsigned, negative ones as signed and anything fractional or too large for 64 bits as a float.
bool as_uint64(const json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return true;
}

std::vector<int64_t> parse_shape(const std::string& name, const json& v, const std::string& source) {
  if (!v.is_array()) fail("{}: tensor '{}': shape must be an array, found {}", source, name, describe(v));
  std::vector<int64_t> shape;
  shape.reserve(v.size());
  for (const json& d : v) {
    uint64_t dim = 0;
    if (!as_uint64(d, &dim) || dim > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("{}: tensor '{}': shape entries must be non-negative integers, found {}", source, name, describe(d));
    shape.push_back(int64_t(dim));
  }
  return shape;
}

// numel * itemsize, or fails when that does not fit in 64 bits (such a tensor cannot be in any file).
uint64_t expected_nbytes(const SafetensorsEntry& e, int itemsize, const std::string& source) {
  uint64_t n = uint64_t(itemsize);
  for (int64_t d : e.shape)
    if (__builtin_mul_overflow(n, uint64_t(d), &n))
      fail("{}: tensor '{}': shape of {} dimensions has a byte size that overflows 64 bits", source, e.name,
           e.shape.size());
  return n;
}

SafetensorsEntry parse_entry(const std::string& name, const json& v, uint64_t data_size, const std::string& source) {
  if (!v.is_object()) fail("{}: tensor '{}': entry must be an object, found {}", source, name, describe(v));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) fail("{}: tensor '{}': entry has no '{}'", source, name, key);

  SafetensorsEntry e;
  e.name = name;
  const json& dtype = v["dtype"];
  if (!dtype.is_string()) fail("{}: tensor '{}': dtype must be a string, found {}", source, name, describe(dtype));
  e.dtype = dtype.get<std::string>();
  int itemsize = safetensors_itemsize(e.dtype);
  if (itemsize == 0)
    fail("{}: tensor '{}' has unknown dtype '{}' (known: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2)",
         source, name, e.dtype);
  e.shape = parse_shape(name, v["shape"], source);

  const json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !as_uint64(offsets[0], &e.begin) ||
      !as_uint64(offsets[1], &e.end))
    fail("{}: tensor '{}': data_offsets must be [begin, end] of non-negative integers, found {}", source, name,
         offsets.is_array() && offsets.size() == 2 ? fmt::format("[{}, {}]", describe(offsets[0]), describe(offsets[1]))
                                                   : describe(offsets));
  if (e.begin > e.end)
    fail("{}: tensor '{}': data_offsets [{}, {}] end before they begin", source, name, e.begin, e.end);

  uint64_t nbytes = expected_nbytes(e, itemsize, source);
  if (e.end - e.begin != nbytes)
    fail("{}: tensor '{}': data_offsets [{}, {}] span {} bytes, but dtype {} and shape [{}] need {}", source, name,
         e.begin, e.end, e.end - e.begin, e.dtype, fmt::join(e.shape, ", "), nbytes);
  if (e.end > data_size)
    fail("tensor '{}': data_offsets [{}, {}] run past the end of the data region ({} bytes) in {} (truncated file?)",
         name, e.begin, e.end, data_size, source);
  return e;
}

// Two entries sharing bytes would let a write through one view (or a wrong offset) corrupt another
// weight silently; no legitimate writer produces that.
void check_no_overlap(const std::map<std::string, SafetensorsEntry>& tensors, const std::string& source) {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& [name, e] : tensors)
    if (e.end > e.begin) by_offset.push_back(&e);  // empty tensors occupy no bytes
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->name < b->name;
  });
  // Sorted by begin, the tensors are disjoint iff each starts at or after the end of the one before.
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsEntry& prev = *by_offset[i - 1];
    const SafetensorsEntry& cur = *by_offset[i];
    if (cur.begin < prev.end)
      fail("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap in the data region", source, prev.name, prev.begin,
           prev.end, cur.name, cur.begin, cur.end);
  }
}

}  // namespace

SafetensorsHeader parse_safetensors(const uint8_t* bytes, size_t size, const std::string& source) {
  if (size < 8)
    fail("{}: file is {} bytes; a safetensors file starts with an 8-byte header length", source, size);
  const uint64_t header_len = read_u64_le(bytes);
  if (header_len > size - 8)  // written this way round so that 8 + header_len cannot overflow
    fail("{}: header length {} runs past the end of the file ({} bytes)", source, header_len, size);

  const json header = parse_header_json(bytes + 8, size_t(header_len), source);
  if (!header.is_object()) fail("{}: the safetensors header must be a JSON object, found {}", source, describe(header));

  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  SafetensorsHeader out;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      out.metadata = parse_metadata(value, source);
      continue;
    }
    SafetensorsEntry e = parse_entry(name, value, data_size, source);
    e.data = data + e.begin;
    out.tensors.emplace(name, std::move(e));
  }
  check_no_overlap(out.tensors, source);
  return out;
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.file = MappedFile::open(path);
  f.header = parse_safetensors(f.file->data(), f.file->size(), path.string());
  return f;
}

}  // namespace mk
