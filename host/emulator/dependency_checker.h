// Happens-before checker for the emulator: a vector-clock race detector (in the spirit of FastTrack)
// over the schedule's counters. Every access to a shared buffer names the instruction making it; an
// access that conflicts with another that no counter wait orders it after is a schedule bug, reported
// naming both instructions, whether or not this interleaving happened to run them in a harmful order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace mk::emu {

// One executed instruction: its step, its index in Schedule::instrs and its canonical position.
struct InstrRef {
  uint32_t step = 0;
  uint32_t index = 0;
  uint32_t seq = 0;
  uint32_t device = 0;  // tensor parallel: the device it runs on
  bool before(const InstrRef& o) const { return step != o.step ? step < o.step : seq < o.seq; }
};

class DependencyChecker {
 public:
  // `describe(ref)` renders an instruction for messages ("step 2, workgroup 7: layer 0 attention ...").
  DependencyChecker(int num_workgroups, uint32_t num_counters, std::function<std::string(const InstrRef&)> describe);

  int add_buffer(std::string name, size_t cells);

  // Synchronisation. release: the workgroup's counter add; acquire: its wait saw the counter reach `target`.
  void release(int wg, uint32_t counter);
  void acquire(int wg, uint32_t counter, uint32_t target);
  // An add with acquire and release that found the counter at `before` (a last-arriver count): it
  // acquires the first `before` releases, then releases, so the add that completes a count is ordered
  // after every earlier adder's writes.
  void read_modify_write(int wg, uint32_t counter, uint32_t before);

  // A claim on counter line `line` (an add whose value names a rank of claimed rows: ClaimedRows in
  // runtime/schedule.h). Claims of one step may race each other; what must hold is that every claim of
  // the step before (all `workgroups` of them) happens before it, since its value is read as an offset
  // from step x workgroups. A claim not so ordered is a violation naming both claims.
  void claim(int wg, const InstrRef& who, uint32_t line, uint32_t workgroups);

  // Accesses to cells [begin, end) of a buffer. An unordered conflict is recorded (once per instruction
  // pair and buffer); throw_if_violations() reports them all.
  void read(int wg, const InstrRef& who, int buffer, size_t begin, size_t end);
  void write(int wg, const InstrRef& who, int buffer, size_t begin, size_t end);
  // Atomic adds (the kernel's atomicAdd into a sum that several workgroups build): unordered with each
  // other they are fine; a read or write of the cells must be ordered with every add, as with a write.
  void accumulate(int wg, const InstrRef& who, int buffer, size_t begin, size_t end);

  // Throws mk::Error listing every violation seen (up to kMaxReported), if any.
  void throw_if_violations() const;
  static constexpr size_t kMaxReported = 12;
  // Bytes of bookkeeping per cell before any read is recorded in it (for memory estimates).
  static constexpr size_t cell_bytes() { return sizeof(Cell); }

 private:
  struct Access {
    int wg = -1;
    uint32_t clock = 0;
    InstrRef ref;
  };
  struct Cell {
    Access last_write;
    std::vector<Access> reads;  // since the last write, the latest per workgroup
    std::vector<Access> adds;   // since the last write, the latest per workgroup
  };
  struct Buffer {
    std::string name;
    std::vector<Cell> cells;
  };
  struct ClaimLog {  // per counter line: the claims of the latest step that claimed, and of the step before
    uint32_t step = 0;
    std::vector<Access> current, previous;
  };
  using Clock = std::vector<uint32_t>;

  enum class AccessKind { Read, Add, Write };
  void access(int wg, const InstrRef& who, int buffer, size_t begin, size_t end, AccessKind kind);
  // Replaces the access of a's workgroup in `list`, or adds a.
  static void note_latest(std::vector<Access>& list, const Access& a);
  bool ordered(const Access& earlier, int wg) const { return earlier.wg < 0 || earlier.clock <= clocks_[size_t(wg)][size_t(earlier.wg)]; }
  void report(const Access& earlier, const Access& now, const Buffer& buffer, size_t cell, bool earlier_writes,
              bool now_writes);
  void report_claim(const std::string& what, const Access& later, const Access* earlier, uint32_t line);

  std::vector<Clock> clocks_;                  // per workgroup
  std::vector<std::vector<Clock>> snapshots_;  // per counter: clock after its n-th release (index n-1)
  std::vector<Buffer> buffers_;
  std::vector<ClaimLog> claims_;  // per counter line
  std::function<std::string(const InstrRef&)> describe_;
  // Reads before (or unordered with) their producer are the root causes; overwrites of data still to be
  // read usually follow from them. Both are kept, root causes listed first.
  std::vector<std::string> read_before_write_, write_before_read_;
  // (reader, writer) instructions reported, each as (device, index): the same index on two devices is
  // two instructions.
  using ReportKey = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>;
  static ReportKey report_key(const InstrRef& reader, const InstrRef& writer) {
    return {reader.device, reader.index, writer.device, writer.index};
  }
  std::vector<ReportKey> reported_;
  size_t violation_count_ = 0;
};

}  // namespace mk::emu
