// libFuzzer target for the safetensors header parser (built by scripts/run_fuzz.sh).
// Any input must either parse or throw mk::Error; another exception, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>

#include "runtime/error.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    mk::SafetensorsHeader header = mk::parse_safetensors(data, size, "fuzz-input");
    // Touch the first and last byte of every tensor: AddressSanitizer then proves that the bounds
    // the parser accepted lie inside the input.
    volatile uint8_t sink = 0;
    for (const auto& [name, entry] : header.tensors) {
      if (entry.end == entry.begin) continue;
      sink = sink ^ entry.data[0] ^ entry.data[entry.end - entry.begin - 1];
    }
    (void)sink;
  } catch (const mk::Error&) {
    // Rejected input: the expected outcome for almost everything the fuzzer generates.
  }
  return 0;
}
