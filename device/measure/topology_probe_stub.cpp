// probe_topology for builds without a GPU (MK_GPU=none): the symbol exists so tools link everywhere;
// callers catch the error and fall back to a synthetic topology.
#include "device/measure/topology_probe.h"

#include "runtime/error.h"

namespace mk {

Topology probe_topology(int device, const ProbeOptions&) {
  fail("topology probe for device {}: monokernel was built without GPU support (MK_GPU=none); "
       "rebuild with -DMK_GPU=nvidia or -DMK_GPU=amd, or use a synthetic topology",
       device);
}

const char* probe_platform() { return "none"; }

}  // namespace mk
