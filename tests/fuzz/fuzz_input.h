// The fuzz targets' common input form: N fields separated by NUL bytes (missing fields are empty; the
// last field keeps any further NULs).
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

}  // namespace mk::fuzz
