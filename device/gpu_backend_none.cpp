// MK_GPU=none: the GPU backend is absent; callers fall back to the CPU emulator.
#include "device/gpu_backend.h"
#include "runtime/error.h"

namespace mk {

bool gpu_available(std::string* why) {
  if (why) *why = "this build has no GPU support (configured with MK_GPU=none)";
  return false;
}

std::unique_ptr<GpuBackend> create_gpu_backend(const Model&, const GpuOptions&) {
  fail("this build has no GPU support (configured with MK_GPU=none); rebuild with -DMK_GPU=nvidia or amd");
}

}  // namespace mk
