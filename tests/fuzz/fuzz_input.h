// What the fuzz targets share: their input form, N fields separated by NUL bytes (missing fields are
// empty; the last field keeps any further NULs), and the check that errors do not leak nlohmann's text.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mk::fuzz {

template <size_t N>
std::array<std::string_view, N> split_at_nul(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::array<std::string_view, N> parts;
  for (std::string_view& part : parts) {
    const size_t nul = rest.find('\0');
    part = rest.substr(0, nul);
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  }
  return parts;
}

// Whether an error message carries nlohmann's own text ("[json.exception.") other than in a JSON parse
// error ("not valid JSON"): the parsers must say in their own words what is wrong. An input that holds
// the marker's stem proves nothing, since messages may quote the input, and a quote cut short ends in
// "...": the input's "[json.exception&" quoted as "[json.exception..." reads as the marker.
inline bool leaks_json_library_message(std::string_view message, std::string_view input) {
  constexpr std::string_view kMarker = "[json.exception.";
  constexpr std::string_view kStem = "[json.exception";
  return input.find(kStem) == std::string_view::npos && message.find(kMarker) != std::string_view::npos &&
         message.find("not valid JSON") == std::string_view::npos;
}

}  // namespace mk::fuzz
