// AnalyzeOperators(): torch.profiler's key_averages() from a trace (docs/ANALYSIS.md, "Operator
// table"). The steps are torch's, in its order, so that the numbers agree with what torch printed
// for the same session:
//   1. every CPU event (operators, record_function ranges, CUDA runtime/driver calls, the
//      profiler's overhead) nests by time on its thread (EventList._populate_cpu_children);
//   2. each GPU activity belongs to the operator whose External id it carries
//      (_parse_kineto_results);
//   3. an operator whose only child has its own name gives way to that child
//      (EventList._remove_dup_nodes);
//   4. self/total CPU and CUDA time per instance (FunctionEvent), summed per name (key_averages).
// Memory: a few words per CPU event and per GPU activity, freed on return.
#include "analysis/operator_table.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "common/checked_math.h"

namespace profd::analysis {
namespace {

constexpr uint32_t kNone = UINT32_MAX;

// The CPU events of all threads of all files as one forest. Node ids: [0, ops.size()) are
// trace.ops, then trace.host (CUDA synchronization records are not CPU events and stay out).
class OperatorForest {
 public:
  explicit OperatorForest(const Trace& t)
      : t_(t), nops_(static_cast<uint32_t>(t.ops.size())), n_(nops_ + t.host.size()) {}

  OperatorAnalysis Run(const absl::flat_hash_map<int64_t, uint32_t>& launch_of,
                       const AnalysisOptions& options);

 private:
  int64_t Start(uint32_t n) const {
    return n < nops_ ? t_.ops[n].start_ns : t_.host[n - nops_].start_ns;
  }
  int64_t End(uint32_t n) const {
    return n < nops_ ? t_.ops[n].end_ns() : t_.host[n - nops_].end_ns();
  }
  int64_t Duration(uint32_t n) const {
    return n < nops_ ? t_.ops[n].dur_ns : t_.host[n - nops_].dur_ns;
  }
  uint32_t Name(uint32_t n) const { return n < nops_ ? t_.ops[n].name : t_.host[n - nops_].name; }
  // An operator or record_function range: what gets a row and may own GPU activities.
  bool IsOperator(uint32_t n) const {
    return n < nops_ && t_.ops[n].kind != CpuOp::Kind::kOverhead;
  }
  uint64_t RowKey(uint32_t n) const {
    return (uint64_t{t_.ops[n].name} << 1) |
           (t_.ops[n].kind == CpuOp::Kind::kUserAnnotation ? 1 : 0);
  }

  // The nearest ancestor not removed in step 3 (path-compressed: removed nodes form chains).
  uint32_t AliveParent(uint32_t n) {
    uint32_t p = parent_[n];
    while (p != kNone && removed_[p]) p = parent_[p];
    parent_[n] = p;
    return p;
  }

  // Per node after step 3: CUDA total (own + children's), GPU activities under it, and the
  // durations of its direct children.
  struct SubtreeTotals {
    std::vector<int64_t> cuda_ns;
    std::vector<uint32_t> events;
    std::vector<int64_t> children_ns;
  };

  void BuildForest();
  void AttributeGpuActivities(const absl::flat_hash_map<int64_t, uint32_t>& launch_of,
                              OperatorSummary* summary);
  void RemoveDuplicateNodes();
  SubtreeTotals SumSubtrees();
  void GroupRowsByName(const SubtreeTotals& totals, OperatorAnalysis* out);
  void SortRowsByCudaTotal(OperatorAnalysis* out);
  std::vector<std::pair<uint32_t, uint32_t>> ActivitiesByLauncher(OperatorAnalysis* out);
  void ListKernelsOfTopRows(const std::vector<std::pair<uint32_t, uint32_t>>& activities,
                            const AnalysisOptions& options, OperatorAnalysis* out);

  const Trace& t_;
  const uint32_t nops_;
  const size_t n_;
  std::vector<uint32_t> order_;   // per thread, by (start, -end): parents before children
  std::vector<uint32_t> parent_;  // kNone for a root
  std::vector<uint32_t> children_;
  std::vector<uint8_t> removed_;
  // GPU activities a node owns (torch's FunctionEvent.kernels): their time and count, and whose
  // they were first (step 3 lifts a removed child's kernels into its parent).
  std::vector<int64_t> own_ns_;
  std::vector<uint32_t> own_events_;
  std::vector<uint32_t> kernels_of_;
  std::vector<uint32_t> assigned_;  // per GPU activity: the node it was attached to in step 2
};

void OperatorForest::BuildForest() {
  // Threads are (file, pid, tid). torch puts events no operator is linked to (the profiler's
  // overhead, e.g. "Activity Buffer Request") on the thread that stopped the profiler; Kineto
  // writes them with pid -1 and tid 0. The main thread of the process that made the CUDA calls
  // (tid == pid) is that thread when the process ran its operators there, else the thread with
  // most operators in that process.
  absl::flat_hash_map<std::tuple<uint16_t, int32_t, int32_t>, uint64_t> ops_per_thread;
  for (const CpuOp& op : t_.ops) {
    if (op.kind != CpuOp::Kind::kOverhead) ++ops_per_thread[{op.file, op.pid, op.tid}];
  }
  std::vector<std::pair<int32_t, int32_t>> main_thread(t_.files.size() + 1, {-1, -1});
  std::vector<uint64_t> main_ops(main_thread.size(), 0);
  for (const auto& [key, count] : ops_per_thread) {
    auto [file, pid, tid] = key;
    size_t f = std::min<size_t>(file, t_.files.size());
    int32_t host_pid = file < t_.files.size() ? t_.files[file].host_pid : -1;
    // Rank: the host process's tid == pid, then any thread of the host process, then others.
    uint64_t rank = (pid == host_pid && tid == pid) ? UINT64_MAX
                    : pid == host_pid               ? (uint64_t{1} << 62) + count
                                                    : count;
    if (rank > main_ops[f] || (rank == main_ops[f] && std::make_pair(pid, tid) < main_thread[f])) {
      main_ops[f] = rank;
      main_thread[f] = {pid, tid};
    }
  }

  struct Entry {
    uint32_t thread;
    uint32_t rank;  // at equal intervals: operators enclose API calls and overhead
    int64_t start;
    int64_t end;
    uint32_t node;
  };
  absl::flat_hash_map<std::tuple<uint16_t, int32_t, int32_t>, uint32_t> thread_ids;
  auto thread_of = [&](uint16_t file, int32_t pid, int32_t tid) {
    return thread_ids.try_emplace({file, pid, tid}, static_cast<uint32_t>(thread_ids.size()))
        .first->second;
  };
  std::vector<Entry> entries;
  entries.reserve(n_);
  for (uint32_t i = 0; i < nops_; ++i) {
    const CpuOp& op = t_.ops[i];
    int32_t pid = op.pid, tid = op.tid;
    if (op.kind == CpuOp::Kind::kOverhead) {
      size_t f = std::min<size_t>(op.file, t_.files.size());
      if (main_ops[f] > 0) std::tie(pid, tid) = main_thread[f];
    }
    entries.push_back({thread_of(op.file, pid, tid), op.kind == CpuOp::Kind::kOverhead ? 1u : 0u,
                       op.start_ns, op.end_ns(), i});
  }
  for (uint32_t j = 0; j < t_.host.size(); ++j) {
    const HostCall& c = t_.host[j];
    if (c.type == HostCall::Type::kSync) continue;
    entries.push_back({thread_of(c.file, c.pid, c.tid),
                       c.type == HostCall::Type::kRuntime ? 2u : 3u, c.start_ns, c.end_ns(),
                       nops_ + j});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.thread, a.start, b.end, a.rank, a.node) <
           std::tie(b.thread, b.start, a.end, b.rank, b.node);
  });

  // torch's rule: an event is a child of the innermost open event that it lies inside
  // (start < parent end, end <= parent end); an event that straddles an end closes that parent.
  parent_.assign(n_, kNone);
  children_.assign(n_, 0);
  order_.reserve(entries.size());
  std::vector<uint32_t> open;
  uint32_t thread = kNone;
  for (const Entry& e : entries) {
    if (e.thread != thread) {
      open.clear();
      thread = e.thread;
    }
    while (!open.empty()) {
      uint32_t p = open.back();
      if (e.start >= End(p) || e.end > End(p)) {
        open.pop_back();
      } else {
        parent_[e.node] = p;
        ++children_[p];
        break;
      }
    }
    open.push_back(e.node);
    order_.push_back(e.node);
  }
}

void OperatorForest::AttributeGpuActivities(const absl::flat_hash_map<int64_t, uint32_t>& launch_of,
                                            OperatorSummary* summary) {
  // External id -> operator, sorted (a few bytes per operator, no hash map).
  std::vector<std::pair<int64_t, uint32_t>> by_external_id;
  for (uint32_t i = 0; i < nops_; ++i) {
    if (IsOperator(i) && t_.ops[i].external_id >= 0) {
      by_external_id.push_back({t_.ops[i].external_id, i});
    }
  }
  std::sort(by_external_id.begin(), by_external_id.end());

  own_ns_.assign(n_, 0);
  own_events_.assign(n_, 0);
  assigned_.assign(t_.gpu.size(), kNone);
  for (uint32_t i = 0; i < t_.gpu.size(); ++i) {
    const GpuActivity& a = t_.gpu[i];
    auto own = [&](uint32_t n) {
      own_ns_[n] = SaturatingAdd(own_ns_[n], a.dur_ns);
      ++own_events_[n];
    };
    if (a.external_id >= 0) {
      auto [lo, hi] = std::equal_range(
          by_external_id.begin(), by_external_id.end(), std::make_pair(a.external_id, 0u),
          [](const auto& x, const auto& y) { return x.first < y.first; });
      // torch gives the activity to every operator with that id (ids are unique in its traces);
      // the launcher is the innermost, the one that started last.
      for (auto it = lo; it != hi; ++it) {
        own(it->second);
        if (assigned_[i] == kNone || Start(it->second) >= Start(assigned_[i])) {
          assigned_[i] = it->second;
        }
      }
    }
    if (assigned_[i] == kNone && a.correlation >= 0) {
      // No External id (Kineto on-demand traces leave it off some kernels, our synthetic and
      // hand-made traces off all): the innermost operator around the launch call, which is the
      // operator whose External id the call would carry.
      auto it = launch_of.find(a.correlation);
      if (it != launch_of.end()) {
        uint32_t p = parent_[nops_ + it->second];
        while (p != kNone && !IsOperator(p)) p = parent_[p];
        if (p != kNone) {
          own(p);
          assigned_[i] = p;
          ++summary->attributed_by_launch_call;
        }
      }
    }
    if (assigned_[i] != kNone) ++summary->device_events_attributed;
  }
}

void OperatorForest::RemoveDuplicateNodes() {
  // torch drops a node whose parent has its name and no other child (a dispatcher wrapper of the
  // same op): the parent takes the child's children and the child's kernels, in place of its own.
  removed_.assign(n_, 0);
  kernels_of_.resize(n_);
  std::iota(kernels_of_.begin(), kernels_of_.end(), 0u);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t n : order_) {
      if (removed_[n]) continue;
      uint32_t p = AliveParent(n);
      if (p == kNone || Name(p) != Name(n) || children_[p] != 1) continue;
      children_[p] = children_[n];
      own_ns_[p] = own_ns_[n];
      own_events_[p] = own_events_[n];
      kernels_of_[p] = kernels_of_[n];
      removed_[n] = 1;
      changed = true;
    }
  }
}

// Totals per node, children before parents: CUDA total = own + children's CUDA totals; self
// CPU = duration - direct children's durations.
OperatorForest::SubtreeTotals OperatorForest::SumSubtrees() {
  SubtreeTotals t{own_ns_, own_events_, std::vector<int64_t>(n_, 0)};
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    uint32_t n = *it;
    if (removed_[n]) continue;
    uint32_t p = AliveParent(n);
    if (p == kNone) continue;
    t.cuda_ns[p] = SaturatingAdd(t.cuda_ns[p], t.cuda_ns[n]);
    t.events[p] =
        static_cast<uint32_t>(std::min<uint64_t>(uint64_t{t.events[p]} + t.events[n], UINT32_MAX));
    t.children_ns[p] = SaturatingAdd(t.children_ns[p], Duration(n));
  }
  return t;
}

// key_averages: one row per (name, is_user_annotation).
void OperatorForest::GroupRowsByName(const SubtreeTotals& totals, OperatorAnalysis* out) {
  OperatorSummary& s = out->summary;
  absl::flat_hash_map<uint64_t, uint32_t> row_of;
  std::vector<uint32_t>& node_row = children_;  // child counts are no longer needed
  for (uint32_t n : order_) {
    if (removed_[n]) continue;
    int64_t self_cpu = SaturatingSub(Duration(n), totals.children_ns[n]);
    s.self_cpu_total_ns = SaturatingAdd(s.self_cpu_total_ns, self_cpu);
    node_row[n] = kNone;
    if (!IsOperator(n)) continue;
    auto [it, inserted] = row_of.try_emplace(RowKey(n), static_cast<uint32_t>(out->rows.size()));
    if (inserted) {
      OperatorRow row;
      row.name = t_.names.Name(t_.ops[n].name);
      row.user_annotation = t_.ops[n].kind == CpuOp::Kind::kUserAnnotation;
      out->rows.push_back(std::move(row));
    }
    node_row[n] = it->second;
    OperatorRow& row = out->rows[it->second];
    ++row.calls;
    ++s.instances;
    row.cpu_total_ns = SaturatingAdd(row.cpu_total_ns, Duration(n));
    row.self_cpu_ns = SaturatingAdd(row.self_cpu_ns, self_cpu);
    row.cuda_total_ns = SaturatingAdd(row.cuda_total_ns, totals.cuda_ns[n]);
    row.self_cuda_ns = SaturatingAdd(row.self_cuda_ns, own_ns_[n]);
    row.device_events = SaturatingAdd(row.device_events, uint64_t{totals.events[n]});
    row.device_events_self = SaturatingAdd(row.device_events_self, uint64_t{own_events_[n]});
  }
}

// key_averages().table(sort_by="cuda_time_total"); ties by CPU total, then name.
void OperatorForest::SortRowsByCudaTotal(OperatorAnalysis* out) {
  std::vector<uint32_t>& node_row = children_;
  std::vector<uint32_t> by_rank(out->rows.size());
  std::iota(by_rank.begin(), by_rank.end(), 0u);
  std::sort(by_rank.begin(), by_rank.end(), [&](uint32_t a, uint32_t b) {
    const OperatorRow &x = out->rows[a], &y = out->rows[b];
    return std::tie(y.cuda_total_ns, y.cpu_total_ns, x.name, x.user_annotation) <
           std::tie(x.cuda_total_ns, x.cpu_total_ns, y.name, y.user_annotation);
  });
  std::vector<uint32_t> rank_of(out->rows.size());
  std::vector<OperatorRow> sorted;
  sorted.reserve(out->rows.size());
  for (uint32_t r = 0; r < by_rank.size(); ++r) {
    rank_of[by_rank[r]] = r;
    sorted.push_back(std::move(out->rows[by_rank[r]]));
  }
  out->rows = std::move(sorted);
  for (uint32_t n : order_) {
    if (!removed_[n] && node_row[n] != kNone) node_row[n] = rank_of[node_row[n]];
  }
  for (OperatorRow& row : out->rows) {
    double calls = static_cast<double>(row.calls);
    row.kernels_per_call = static_cast<double>(row.device_events) / calls;
    row.cuda_per_call_ns = static_cast<double>(row.cuda_total_ns) / calls;
    row.cpu_per_call_ns = static_cast<double>(row.cpu_total_ns) / calls;
  }
  out->summary.distinct = out->rows.size();
}

// Who launched each GPU activity after step 3: the node now holding the kernels of the node it
// was attached to (none when step 3 replaced them, as torch does). Returns (holder, GPU activity)
// pairs, sorted.
std::vector<std::pair<uint32_t, uint32_t>> OperatorForest::ActivitiesByLauncher(
    OperatorAnalysis* out) {
  const std::vector<uint32_t>& node_row = children_;
  std::vector<uint32_t> holder(n_, kNone);
  for (uint32_t n : order_) {
    if (!removed_[n]) holder[kernels_of_[n]] = n;
  }
  out->launched_by.assign(t_.gpu.size(), OperatorAnalysis::kNoOperator);
  std::vector<std::pair<uint32_t, uint32_t>> activities;  // (holder, GPU activity)
  for (uint32_t i = 0; i < t_.gpu.size(); ++i) {
    if (assigned_[i] == kNone) continue;
    uint32_t h = holder[assigned_[i]];
    if (h == kNone || !IsOperator(h)) continue;
    out->launched_by[i] = node_row[h];
    activities.push_back({h, i});
  }
  assigned_ = {};
  std::sort(activities.begin(), activities.end());
  return activities;
}

// Kernels under the top rows: walk each thread's tree in order with the path from the root, and
// give each GPU activity to every top row on its path (once per enclosing call, as CUDA total
// counts it), so the kernels under a row add up to its CUDA total.
void OperatorForest::ListKernelsOfTopRows(
    const std::vector<std::pair<uint32_t, uint32_t>>& activities, const AnalysisOptions& options,
    OperatorAnalysis* out) {
  const std::vector<uint32_t>& node_row = children_;
  const uint32_t top = static_cast<uint32_t>(
      std::min<size_t>(out->rows.size(), static_cast<size_t>(std::max(0, options.top_operators))));
  if (top == 0 || options.operator_kernels <= 0) return;
  std::vector<absl::flat_hash_map<uint32_t, OperatorKernel>> kernels(top);
  std::vector<uint32_t> on_path(top, 0);
  std::vector<uint32_t> active;  // top rows with on_path > 0
  std::vector<uint32_t> path;
  auto leave = [&](uint32_t n) {
    uint32_t r = node_row[n];
    if (IsOperator(n) && r < top && --on_path[r] == 0) {
      active.erase(std::find(active.begin(), active.end(), r));
    }
  };
  for (uint32_t n : order_) {
    if (removed_[n]) continue;
    uint32_t p = AliveParent(n);
    while (!path.empty() && path.back() != p) {
      leave(path.back());
      path.pop_back();
    }
    path.push_back(n);
    uint32_t r = node_row[n];
    if (IsOperator(n) && r < top && on_path[r]++ == 0) active.push_back(r);
    auto lo = std::lower_bound(activities.begin(), activities.end(), std::make_pair(n, 0u));
    for (auto it = lo; it != activities.end() && it->first == n; ++it) {
      const GpuActivity& a = t_.gpu[it->second];
      for (uint32_t row : active) {
        OperatorKernel& k = kernels[row][a.name];
        k.count = SaturatingAdd(k.count, uint64_t{on_path[row]});
        k.total_ns = SaturatingAdd(
            k.total_ns,
            static_cast<int64_t>(std::min<uint64_t>(
                SaturatingMul(static_cast<uint64_t>(a.dur_ns), on_path[row]), INT64_MAX)));
      }
    }
  }
  for (uint32_t r = 0; r < top; ++r) {
    std::vector<OperatorKernel>& list = out->rows[r].kernels;
    for (auto& [name, k] : kernels[r]) {
      k.name = t_.names.Name(name);
      list.push_back(std::move(k));
    }
    out->rows[r].distinct_kernels = list.size();
    std::sort(list.begin(), list.end(), [](const OperatorKernel& a, const OperatorKernel& b) {
      return std::tie(b.total_ns, b.count, a.name) < std::tie(a.total_ns, a.count, b.name);
    });
    if (list.size() > static_cast<size_t>(options.operator_kernels)) {
      list.resize(options.operator_kernels);
    }
  }
}

OperatorAnalysis OperatorForest::Run(const absl::flat_hash_map<int64_t, uint32_t>& launch_of,
                                     const AnalysisOptions& options) {
  OperatorAnalysis out;
  OperatorSummary& s = out.summary;
  s.device_events = t_.gpu.size();
  for (const GpuActivity& a : t_.gpu)
    s.self_cuda_total_ns = SaturatingAdd(s.self_cuda_total_ns, a.dur_ns);
  bool any = false;
  for (uint32_t i = 0; i < nops_ && !any; ++i) any = IsOperator(i);
  if (!any) return out;

  BuildForest();
  AttributeGpuActivities(launch_of, &s);
  RemoveDuplicateNodes();
  GroupRowsByName(SumSubtrees(), &out);  // the totals are freed here
  SortRowsByCudaTotal(&out);
  ListKernelsOfTopRows(ActivitiesByLauncher(&out), options, &out);
  return out;
}

}  // namespace

OperatorAnalysis AnalyzeOperators(const Trace& trace,
                                  const absl::flat_hash_map<int64_t, uint32_t>& launch_of,
                                  const AnalysisOptions& options) {
  if (trace.ops.size() + trace.host.size() >= kNone) return {};  // node ids are 32-bit
  return OperatorForest(trace).Run(launch_of, options);
}

}  // namespace profd::analysis
