// The memory through which the GPUs of one host reach each other (tensor parallel: runtime/tensor_parallel.h):
// one NCCL communicator over the devices one process drives, a symmetric window on each device, and on
// each device a load/store pointer to every device's window (NCCL's LSA pointers: plain NVLink or PCIe
// peer accesses, no multimem). A push is stores through those pointers followed by a system-scope
// release add to a counter in the window it lands in.
//
// NCCL is loaded at run time (libnccl.so.2, 2.28 or newer: its device API's windows), so that a build and
// a one-GPU run need no NCCL at all. NVLink multicast stays off: nothing here uses multimem, and NCCL is
// opened with NCCL_NVLS_ENABLE=0 unless the environment says otherwise.
//
// Opening checks, before anything is allocated: the devices exist, are distinct, and reach each other
// (peer access, every pair); NCCL loads. Then it checks the paths themselves: every device writes a
// pattern into every window and signals; every device waits for the signals and checks what arrived. A
// broken path is an error naming the pair, not a hang in a later launch.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace mk {

class PeerWindows {
 public:
  // `devices`: the GPU ordinals, in rank order (rank 0: the home device); `bytes`: each window's size.
  // Throws mk::Error naming the device, the pair or NCCL's message.
  static std::unique_ptr<PeerWindows> open(const std::vector<int>& devices, size_t bytes);
  ~PeerWindows();
  PeerWindows(const PeerWindows&) = delete;
  PeerWindows& operator=(const PeerWindows&) = delete;

  // GPUs this process can see (0 without a driver).
  static int visible_gpus();

  int size() const;
  int device(int rank) const;
  size_t bytes() const;
  // Rank `rank`'s own window (device memory of device(rank)).
  void* local(int rank) const;
  // On device(rank): the pointer to rank `peer`'s window (peer == rank: the window itself).
  void* peer(int rank, int peer) const;
  // "NCCL 2.28.9" and the paths checked at open, for a log line.
  const char* describe() const;

 private:
  PeerWindows();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mk
