#include "host/emulator/dependency_checker.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/error.h"

namespace mk::emu {

DependencyChecker::DependencyChecker(int num_workgroups, uint32_t num_counters,
                                     std::function<std::string(const InstrRef&)> describe)
    : clocks_(size_t(num_workgroups), Clock(size_t(num_workgroups), 0)),
      snapshots_(num_counters),
      claims_(num_counters),
      describe_(std::move(describe)) {
  for (int w = 0; w < num_workgroups; ++w) clocks_[size_t(w)][size_t(w)] = 1;
}

int DependencyChecker::add_buffer(std::string name, size_t cells) {
  buffers_.push_back(Buffer{std::move(name), std::vector<Cell>(cells)});
  return int(buffers_.size() - 1);
}

void DependencyChecker::release(int wg, uint32_t counter) {
  // An add continues the release sequence: the n-th value carries everything released before it.
  auto& snaps = snapshots_[counter];
  Clock c = clocks_[size_t(wg)];
  if (!snaps.empty())
    for (size_t i = 0; i < c.size(); ++i) c[i] = std::max(c[i], snaps.back()[i]);
  snaps.push_back(std::move(c));
  ++clocks_[size_t(wg)][size_t(wg)];
}

void DependencyChecker::acquire(int wg, uint32_t counter, uint32_t target) {
  // Seeing the counter at `target` only guarantees ordering after the first `target` releases.
  if (target == 0) return;
  const auto& snaps = snapshots_[counter];
  if (snaps.size() < target) fail("dependency checker: counter {} acquired at {} but released only {} times", counter, target, snaps.size());
  const Clock& s = snaps[target - 1];
  Clock& c = clocks_[size_t(wg)];
  for (size_t i = 0; i < c.size(); ++i) c[i] = std::max(c[i], s[i]);
}

void DependencyChecker::read_modify_write(int wg, uint32_t counter, uint32_t before) {
  if (snapshots_[counter].size() != before)
    fail("dependency checker: counter {} read {} by an add but released {} times", counter, before, snapshots_[counter].size());
  acquire(wg, counter, before);
  release(wg, counter);
}

void DependencyChecker::report(const Access& earlier, const Access& now, const Buffer& buffer, size_t cell,
                               bool earlier_writes, bool now_writes) {
  // Name the pair as consumer (the reader) and producer (the writer it should be ordered with).
  const Access& reader = earlier_writes ? now : earlier;
  const Access& writer = earlier_writes ? earlier : now;
  std::string kind;
  if (earlier_writes && now_writes) {
    kind = "two instructions write the same data with nothing ordering them";
  } else if (writer.ref.before(reader.ref)) {
    kind = now_writes ? "read data before its producer finished"
                      : "read data from a producer it does not wait for";
  } else {
    kind = now_writes ? "overwrote data that an earlier instruction still had to read"
                      : "read data that a later instruction had already overwritten";
  }
  const ReportKey key = report_key(reader.ref, writer.ref);
  if (std::find(reported_.begin(), reported_.end(), key) != reported_.end()) return;
  reported_.push_back(key);
  ++violation_count_;
  auto& list = writer.ref.before(reader.ref) ? read_before_write_ : write_before_read_;
  if (list.size() < kMaxReported)
    list.push_back(fmt::format("{}\n  consumer: {}\n  producer: {}\n  buffer {} cell {}: no counter wait orders these "
                               "two instructions",
                               kind, describe_(reader.ref), describe_(writer.ref), buffer.name, cell));
}

void DependencyChecker::report_claim(const std::string& what, const Access& later, const Access* earlier, uint32_t line) {
  const ReportKey key = report_key(later.ref, earlier ? earlier->ref : later.ref);
  if (std::find(reported_.begin(), reported_.end(), key) != reported_.end()) return;
  reported_.push_back(key);
  ++violation_count_;
  if (read_before_write_.size() >= kMaxReported) return;
  std::string text = fmt::format("{}\n  claim: {}", what, describe_(later.ref));
  if (earlier) text += fmt::format("\n  earlier claim: {}", describe_(earlier->ref));
  read_before_write_.push_back(text + fmt::format("\n  claim counter line {}: its value no longer names a rank", line));
}

void DependencyChecker::claim(int wg, const InstrRef& who, uint32_t line, uint32_t workgroups) {
  ClaimLog& log = claims_.at(line);
  const Access self{wg, clocks_[size_t(wg)][size_t(wg)], who};
  if (who.step < log.step) {
    report_claim(fmt::format("a claim of step {} came after claims of step {} had begun", who.step, log.step), self, nullptr, line);
  } else if (who.step > log.step || log.current.empty()) {
    if (who.step > 0 && (who.step != log.step + 1 || log.current.size() != workgroups))
      report_claim(fmt::format("a claim of step {} came before all {} claims of step {} ({} made)", who.step, workgroups,
                               who.step - 1, who.step == log.step + 1 ? log.current.size() : 0),
                   self, nullptr, line);
    log.previous = std::move(log.current);
    log.current.clear();
    log.step = who.step;
  }
  for (const Access& a : log.previous)
    if (!ordered(a, wg)) report_claim("two steps' claims on one counter with nothing ordering them", self, &a, line);
  log.current.push_back(self);
}

void DependencyChecker::throw_if_violations() const {
  if (violation_count_ == 0) return;
  std::string text;
  size_t shown = 0;
  for (const auto* list : {&read_before_write_, &write_before_read_})
    for (const auto& v : *list)
      if (shown++ < kMaxReported) text += "\n- " + v;
  fail("dependency violation in the schedule ({} instruction pairs, {} shown):{}", violation_count_,
       std::min(shown, kMaxReported), text);
}

void DependencyChecker::note_latest(std::vector<Access>& list, const Access& a) {
  auto it = std::find_if(list.begin(), list.end(), [&](const Access& x) { return x.wg == a.wg; });
  if (it != list.end()) *it = a;
  else list.push_back(a);
}

void DependencyChecker::read(int wg, const InstrRef& who, int buffer, size_t begin, size_t end) {
  access(wg, who, buffer, begin, end, AccessKind::Read);
}
void DependencyChecker::accumulate(int wg, const InstrRef& who, int buffer, size_t begin, size_t end) {
  access(wg, who, buffer, begin, end, AccessKind::Add);
}
void DependencyChecker::write(int wg, const InstrRef& who, int buffer, size_t begin, size_t end) {
  access(wg, who, buffer, begin, end, AccessKind::Write);
}

void DependencyChecker::access(int wg, const InstrRef& who, int buffer, size_t begin, size_t end, AccessKind kind) {
  Buffer& b = buffers_[size_t(buffer)];
  const char* what = kind == AccessKind::Read ? "read of" : kind == AccessKind::Add ? "add to" : "write of";
  if (end > b.cells.size()) fail("dependency checker: {} {} cells [{}, {}) past its {} cells", what, b.name, begin, end, b.cells.size());
  const Access self{wg, clocks_[size_t(wg)][size_t(wg)], who};
  const bool writes = kind != AccessKind::Read;  // an add conflicts with a read as a write does
  for (size_t i = begin; i < end; ++i) {
    Cell& cell = b.cells[i];
    if (!ordered(cell.last_write, wg)) report(cell.last_write, self, b, i, true, writes);
    if (kind != AccessKind::Read)
      for (const Access& r : cell.reads)
        if (!ordered(r, wg)) report(r, self, b, i, false, true);
    if (kind != AccessKind::Add)  // adds race each other harmlessly
      for (const Access& a : cell.adds)
        if (!ordered(a, wg)) report(a, self, b, i, true, writes);
    if (kind == AccessKind::Read) {
      note_latest(cell.reads, self);
    } else if (kind == AccessKind::Add) {
      note_latest(cell.adds, self);
    } else {
      cell.last_write = self;
      cell.reads.clear();
      cell.adds.clear();
    }
  }
}

}  // namespace mk::emu
