#include "device/peer_windows.h"

#include <fmt/format.h>

#include <string>

#include "device/gpu.h"
#include "runtime/error.h"

#if defined(MK_PLATFORM_NVIDIA)
#include <dlfcn.h>
#include <nccl.h>
#include <nccl_device.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "device/device_atomics.h"
#endif

namespace mk {

#if defined(MK_PLATFORM_NVIDIA)
namespace {

// NCCL 2.28: the first with the device API's symmetric windows and LSA pointers.
constexpr int kMinNcclVersion = 22800;
constexpr const char* kNcclLibrary = "libnccl.so.2";

// The NCCL functions opening needs, from the library loaded at run time.
struct Nccl {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclMemAlloc) mem_alloc = nullptr;
  decltype(&ncclMemFree) mem_free = nullptr;
  decltype(&ncclCommWindowRegister) window_register = nullptr;
  decltype(&ncclCommWindowDeregister) window_deregister = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  int version = 0;

  // Loaded once; a failure is thrown to every caller (a later call tries again).
  static const Nccl& get() {
    static const Nccl nccl = load();
    return nccl;
  }

  void check(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess) fail("NCCL: {} failed: {}", what, error_string(r));
  }

 private:
  static Nccl load() {
    void* lib = dlopen(kNcclLibrary, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      fail("tensor parallel needs NCCL 2.28 or newer ({}), which could not be loaded: {}; install it (NVIDIA's packages, or "
           "pip's nvidia-nccl-cu13) and add its directory to LD_LIBRARY_PATH",
           kNcclLibrary, dlerror());
    Nccl n;
    auto symbol = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) fail("{} has no {}: tensor parallel needs NCCL 2.28 or newer (its symmetric windows)", kNcclLibrary, name);
    };
    symbol(n.get_version, "ncclGetVersion");
    symbol(n.error_string, "ncclGetErrorString");
    n.check(n.get_version(&n.version), "ncclGetVersion");
    if (n.version < kMinNcclVersion)
      fail("{} is NCCL {}.{}.{}; tensor parallel needs 2.28 or newer (its symmetric windows)", kNcclLibrary, n.version / 10000,
           n.version / 100 % 100, n.version % 100);
    symbol(n.comm_init_all, "ncclCommInitAll");
    symbol(n.comm_destroy, "ncclCommDestroy");
    symbol(n.mem_alloc, "ncclMemAlloc");
    symbol(n.mem_free, "ncclMemFree");
    symbol(n.window_register, "ncclCommWindowRegister");
    symbol(n.window_deregister, "ncclCommWindowDeregister");
    symbol(n.group_start, "ncclGroupStart");
    symbol(n.group_end, "ncclGroupEnd");
    return n;  // the library stays loaded for the process
  }
};

// The check at open: each device writes kCheckWords words into its slot of every window, then adds 1 to
// the window's arrivals word (system scope, release); each device waits until its arrivals count every
// device (acquire), then compares what arrived. Window layout for the check: the arrivals word, then
// from byte kCheckOffset the slots of every rank.
constexpr int kCheckWords = 1024;
constexpr size_t kCheckOffset = 256;
constexpr unsigned long long kCheckTimeoutNs = 5'000'000'000ull;

__host__ __device__ inline unsigned check_pattern(int from, int to, int i) {
  return (0x9E3779B9u * unsigned(from * 64 + to + 1)) ^ unsigned(i);
}
size_t check_bytes(int ranks) { return kCheckOffset + size_t(ranks) * kCheckWords * sizeof(unsigned); }

// out[p] = this device's pointer to rank p's window.
__global__ void lsa_pointers(ncclWindow_t window, int ranks, void** out) {
  if (int(threadIdx.x) < ranks) out[threadIdx.x] = ncclGetLsaPointer(window, 0, int(threadIdx.x));
}

// result[0]: 1 when the wait timed out; result[1]: 1 + the first rank whose words arrived wrong, else 0;
// result[2]: the arrivals seen.
__global__ void check_paths_kernel(void* const* windows, unsigned* own, int rank, int ranks, unsigned* result) {
  for (int p = 0; p < ranks; ++p) {
    unsigned* slot = reinterpret_cast<unsigned*>(static_cast<char*>(windows[p]) + kCheckOffset) + size_t(rank) * kCheckWords;
    for (int i = int(threadIdx.x); i < kCheckWords; i += int(blockDim.x)) slot[i] = check_pattern(rank, p, i);
  }
  __syncthreads();
  __shared__ unsigned timed_out;
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int p = 0; p < ranks; ++p) dev::add_release_system(static_cast<unsigned*>(windows[p]), 1u);
    const unsigned long long t0 = dev::global_timer_ns();
    unsigned seen = 0;
    timed_out = 0;
    while ((seen = dev::load_acquire_system(own)) < unsigned(ranks))
      if (dev::global_timer_ns() - t0 > kCheckTimeoutNs) {
        timed_out = 1;
        break;
      }
    result[0] = timed_out;
    result[2] = seen;
  }
  __syncthreads();
  if (timed_out) return;
  const unsigned* slots = reinterpret_cast<const unsigned*>(reinterpret_cast<const char*>(own) + kCheckOffset);
  for (int q = 0; q < ranks; ++q)
    for (int i = int(threadIdx.x); i < kCheckWords; i += int(blockDim.x))
      if (slots[size_t(q) * kCheckWords + size_t(i)] != check_pattern(q, rank, i)) atomicCAS(&result[1], 0u, unsigned(q + 1));
}

}  // namespace

struct PeerWindows::Impl {
  const Nccl* nccl = nullptr;
  std::vector<int> devices;
  size_t bytes = 0;
  std::vector<ncclComm_t> comms;
  std::vector<void*> buffers;
  std::vector<ncclWindow_t> windows;
  std::vector<void**> pointer_tables;       // per rank, on its device: every rank's window
  std::vector<std::vector<void*>> pointers;  // the same, read back
  std::string description;

  ~Impl() {
    if (!nccl) return;
    if (!windows.empty()) {
      (void)nccl->group_start();
      for (size_t r = 0; r < windows.size(); ++r)
        if (windows[r]) (void)nccl->window_deregister(comms[r], windows[r]);
      (void)nccl->group_end();
    }
    for (size_t r = 0; r < buffers.size(); ++r) {
      (void)cudaSetDevice(devices[r]);
      if (r < pointer_tables.size() && pointer_tables[r]) (void)cudaFree(pointer_tables[r]);
      if (buffers[r]) (void)nccl->mem_free(buffers[r]);
    }
    for (ncclComm_t c : comms)
      if (c) (void)nccl->comm_destroy(c);
  }

  // The setup's devices checked before NCCL is touched: they exist, are distinct, reach each other.
  void check_devices() const {
    int count = 0;
    MK_GPU_CHECK(cudaGetDeviceCount(&count));
    for (size_t r = 0; r < devices.size(); ++r) {
      if (devices[r] < 0 || devices[r] >= count)
        fail("tensor parallel over {} GPUs: GPU {} was asked for, but this machine has {} (0 to {})", devices.size(), devices[r], count,
             count - 1);
      for (size_t q = 0; q < r; ++q)
        if (devices[q] == devices[r]) fail("tensor parallel: GPU {} is listed twice", devices[r]);
    }
    for (int a : devices)
      for (int b : devices) {
        if (a == b) continue;
        int can = 0;
        MK_GPU_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
        if (!can)
          fail("tensor parallel: GPU {} cannot access GPU {}'s memory (no peer access); every pair of its GPUs must be connected "
               "(NVLink, or PCIe with peer access)",
               a, b);
      }
  }

  void check_paths() {
    const int n = int(devices.size());
    std::vector<unsigned*> results(size_t(n), nullptr);
    std::vector<cudaStream_t> streams(size_t(n), nullptr);
    for (int r = 0; r < n; ++r) {
      dev::CurrentDevice on(devices[size_t(r)]);
      MK_GPU_CHECK(cudaMemset(buffers[size_t(r)], 0, check_bytes(n)));
      MK_GPU_CHECK(cudaMalloc(&results[size_t(r)], 3 * sizeof(unsigned)));
      MK_GPU_CHECK(cudaMemset(results[size_t(r)], 0, 3 * sizeof(unsigned)));
      MK_GPU_CHECK(cudaStreamCreateWithFlags(&streams[size_t(r)], cudaStreamNonBlocking));
    }
    for (int r = 0; r < n; ++r) {  // all running at once: each waits for the others' writes
      dev::CurrentDevice on(devices[size_t(r)]);
      check_paths_kernel<<<1, 256, 0, streams[size_t(r)]>>>(pointer_tables[size_t(r)], static_cast<unsigned*>(buffers[size_t(r)]), r, n,
                                                    results[size_t(r)]);
      MK_GPU_CHECK(cudaGetLastError());
    }
    std::string problems;
    for (int r = 0; r < n; ++r) {
      dev::CurrentDevice on(devices[size_t(r)]);
      MK_GPU_CHECK(cudaStreamSynchronize(streams[size_t(r)]));
      unsigned res[3] = {0, 0, 0};
      MK_GPU_CHECK(cudaMemcpy(res, results[size_t(r)], sizeof(res), cudaMemcpyDeviceToHost));
      MK_GPU_CHECK(cudaFree(results[size_t(r)]));
      MK_GPU_CHECK(cudaStreamDestroy(streams[size_t(r)]));
      if (res[0])
        problems += fmt::format("\n  GPU {} waited {} s for the other GPUs' signals and saw {} of {}", devices[size_t(r)],
                                double(kCheckTimeoutNs) * 1e-9, res[2], n);
      else if (res[1])
        problems += fmt::format("\n  what GPU {} wrote into GPU {}'s memory arrived wrong", devices[res[1] - 1], devices[size_t(r)]);
      MK_GPU_CHECK(cudaMemset(buffers[size_t(r)], 0, check_bytes(n)));
    }
    if (!problems.empty()) fail("tensor parallel: the GPUs' peer paths failed their check:{}", problems);
  }
};

PeerWindows::PeerWindows() : impl_(std::make_unique<Impl>()) {}
PeerWindows::~PeerWindows() = default;

std::unique_ptr<PeerWindows> PeerWindows::open(const std::vector<int>& devices, size_t bytes) {
  if (devices.size() < 2) fail("peer windows join at least 2 GPUs (got {})", devices.size());
  const int n = int(devices.size());
  if (bytes < check_bytes(n)) fail("peer windows of {} bytes: at least {} are needed for {} GPUs", bytes, check_bytes(n), n);
  std::unique_ptr<PeerWindows> w(new PeerWindows());
  Impl& m = *w->impl_;
  m.devices = devices;
  m.bytes = bytes;
  m.check_devices();
  // NVLink multicast (NVLS) can take a host's GPUs out of service: off unless the environment says.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  const Nccl& nccl = Nccl::get();
  m.comms.assign(size_t(n), nullptr);
  nccl.check(nccl.comm_init_all(m.comms.data(), n, devices.data()), "ncclCommInitAll");
  m.nccl = &nccl;  // from here the destructor releases what exists
  m.buffers.assign(size_t(n), nullptr);
  for (int r = 0; r < n; ++r) {
    dev::CurrentDevice on(devices[size_t(r)]);
    nccl.check(nccl.mem_alloc(&m.buffers[size_t(r)], bytes), "ncclMemAlloc");
    MK_GPU_CHECK(cudaMemset(m.buffers[size_t(r)], 0, bytes));
  }
  m.windows.assign(size_t(n), nullptr);
  nccl.check(nccl.group_start(), "ncclGroupStart");
  for (int r = 0; r < n; ++r)
    nccl.check(nccl.window_register(m.comms[size_t(r)], m.buffers[size_t(r)], bytes, &m.windows[size_t(r)], NCCL_WIN_COLL_SYMMETRIC),
               "ncclCommWindowRegister");
  nccl.check(nccl.group_end(), "ncclGroupEnd (registering the windows)");
  m.pointer_tables.assign(size_t(n), nullptr);
  m.pointers.assign(size_t(n), std::vector<void*>(size_t(n), nullptr));
  for (int r = 0; r < n; ++r) {
    dev::CurrentDevice on(devices[size_t(r)]);
    MK_GPU_CHECK(cudaMalloc(&m.pointer_tables[size_t(r)], size_t(n) * sizeof(void*)));
    lsa_pointers<<<1, 32>>>(m.windows[size_t(r)], n, m.pointer_tables[size_t(r)]);
    MK_GPU_CHECK(cudaGetLastError());
    MK_GPU_CHECK(cudaMemcpy(m.pointers[size_t(r)].data(), m.pointer_tables[size_t(r)], size_t(n) * sizeof(void*), cudaMemcpyDeviceToHost));
  }
  m.check_paths();
  m.description = fmt::format("NCCL {}.{}.{}, {} GPUs, windows of {} bytes, every peer path checked", nccl.version / 10000,
                              nccl.version / 100 % 100, nccl.version % 100, n, bytes);
  return w;
}

int PeerWindows::visible_gpus() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}
int PeerWindows::size() const { return int(impl_->devices.size()); }
int PeerWindows::device(int rank) const { return impl_->devices.at(size_t(rank)); }
size_t PeerWindows::bytes() const { return impl_->bytes; }
void* PeerWindows::local(int rank) const { return impl_->buffers.at(size_t(rank)); }
void* PeerWindows::peer(int rank, int peer) const { return impl_->pointers.at(size_t(rank)).at(size_t(peer)); }
const char* PeerWindows::describe() const { return impl_->description.c_str(); }

#else  // AMD: RCCL's device API is not wired in yet.

struct PeerWindows::Impl {};
PeerWindows::PeerWindows() : impl_(std::make_unique<Impl>()) {}
PeerWindows::~PeerWindows() = default;
std::unique_ptr<PeerWindows> PeerWindows::open(const std::vector<int>&, size_t) {
  fail("tensor parallel across GPUs is not supported on AMD GPUs in this build yet (RCCL's device API is not wired in)");
}
int PeerWindows::visible_gpus() {
  int count = 0;
  return hipGetDeviceCount(&count) == hipSuccess ? count : 0;
}
int PeerWindows::size() const { return 0; }
int PeerWindows::device(int) const { return -1; }
size_t PeerWindows::bytes() const { return 0; }
void* PeerWindows::local(int) const { return nullptr; }
void* PeerWindows::peer(int, int) const { return nullptr; }
const char* PeerWindows::describe() const { return "not supported on AMD in this build"; }

#endif

}  // namespace mk
