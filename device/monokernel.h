// Entry points of the persistent kernel, for its launcher (device/gpu_backend.cu).
#pragma once

namespace mk::dev {

// The kernel instantiation for BF16 (fp16 == false) or F16 weights, as a launchable function pointer.
const void* monokernel_entry(bool fp16);

}  // namespace mk::dev
