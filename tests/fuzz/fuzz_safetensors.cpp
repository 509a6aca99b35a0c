// libFuzzer target for the safetensors header parser (built by scripts/run_fuzz.sh).
// Any input must either parse or throw mk::Error; another exception, a crash or a sanitizer report is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    mk::SafetensorsHeader header = mk::parse_safetensors(data, size, "fuzz-input");
    // Touch the first and last byte of every tensor: AddressSanitizer then proves that the bounds
    // the parser accepted lie inside the input.
    volatile uint8_t sink = 0;
    volatile float values = 0;
    for (const auto& [name, entry] : header.tensors) {
      if (entry.end == entry.begin) continue;
      sink = sink ^ entry.data[0] ^ entry.data[entry.end - entry.begin - 1];
      // Read the floating-point elements as model loading does (load_as_float): a header may place a
      // tensor at any byte offset, and UndefinedBehaviorSanitizer's alignment check (run_fuzz.sh) proves
      // that the reads do not assume an aligned address (the seed unaligned_bf16.safetensors is one).
      const mk::DType type = entry.dtype == "F32" ? mk::DType::F32
                             : entry.dtype == "F16" ? mk::DType::F16
                             : entry.dtype == "BF16" ? mk::DType::BF16
                                                    : mk::DType::F8_E4M3;
      if (type == mk::DType::F8_E4M3 && entry.dtype != "F8_E4M3") continue;
      const int64_t count = std::min<int64_t>(int64_t(entry.end - entry.begin) / mk::dtype_size(type), 4096);
      for (int64_t i = 0; i < count; ++i) values = values + mk::load_as_float(entry.data, type, i);
    }
    (void)sink;
    (void)values;
  } catch (const mk::Error&) {
    // Rejected input: the expected outcome for almost everything the fuzzer generates.
  }
  return 0;
}
