#include "tests/support/perfetto/perfetto_trace.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/reflection.h"
#include "tests/support/fixtures.h"

namespace profd::testing {
namespace {

namespace pp = perfetto::protos;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

constexpr uint32_t kRealtime = 1;
constexpr uint32_t kNeedsIncrementalState = 2, kIncrementalStateCleared = 1;

// Fields the subset does not declare (a number or wire type other than Perfetto's), anywhere.
void FindUnknown(const Message& m, const std::string& where, std::vector<std::string>* problems) {
  const auto* reflection = m.GetReflection();
  if (!reflection->GetUnknownFields(m).empty()) {
    problems->push_back(absl::StrCat(where, " (", m.GetTypeName(), ") has fields Perfetto's ",
                                     m.GetTypeName(), " does not declare so"));
  }
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(m, f); ++i) {
        FindUnknown(reflection->GetRepeatedMessage(m, f, i), absl::StrCat(where, ".", f->name()),
                    problems);
      }
    } else {
      FindUnknown(reflection->GetMessage(m, f), absl::StrCat(where, ".", f->name()), problems);
    }
  }
}

std::string ValueText(const pp::DebugAnnotation& a,
                      const absl::flat_hash_map<uint64_t, std::string>& strings,
                      std::vector<std::string>* problems) {
  switch (a.value_case()) {
    case pp::DebugAnnotation::kStringValueIid: {
      auto it = strings.find(a.string_value_iid());
      if (it == strings.end()) {
        problems->push_back(absl::StrCat("string value ", a.string_value_iid(), " not interned"));
        return "";
      }
      return it->second;
    }
    case pp::DebugAnnotation::kBoolValue:
      return a.bool_value() ? "true" : "false";
    case pp::DebugAnnotation::kUintValue:
      return absl::StrCat(a.uint_value());
    case pp::DebugAnnotation::kIntValue:
      return absl::StrCat(a.int_value());
    case pp::DebugAnnotation::kDoubleValue:
      return absl::StrCat(a.double_value());
    case pp::DebugAnnotation::kStringValue:
      return a.string_value();
    default:
      return "";
  }
}

struct Event {
  uint64_t ns = 0;
  size_t order = 0;
  uint64_t track = 0;
  const pp::TrackEvent* event = nullptr;
  std::string name;
  std::map<std::string, std::string> args;
};

}  // namespace

const PerfettoTrack* PerfettoTraceContents::Find(const std::string& name) const {
  for (const auto& [uuid, t] : tracks) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

size_t PerfettoTraceContents::SliceCount() const {
  size_t n = 0;
  for (const auto& [uuid, t] : tracks) n += t.slices.size();
  return n;
}

PerfettoTraceContents ReadPerfettoTrace(const std::string& path) {
  return ReadPerfettoTraceBytes(ReadGzip(path));
}

PerfettoTraceContents ReadPerfettoTraceBytes(const std::string& bytes) {
  PerfettoTraceContents out;
  auto problem = [&](std::string text) { out.problems.push_back(std::move(text)); };
  pp::Trace trace;
  if (!trace.ParseFromString(bytes)) {
    problem("not a perfetto.protos.Trace");
    return out;
  }
  FindUnknown(trace, "trace", &out.problems);
  out.packets = trace.packet_size();

  // In file order, as a reader tokenizes: the sequence's incremental state, the clock, tracks.
  bool cleared = false;
  uint32_t default_clock = 0;
  bool have_clock = false;
  bool incremental = false;
  int64_t clock_now = 0;  // the sequence clock's value at the last packet
  absl::flat_hash_map<uint64_t, std::string> names, annotation_names, string_values;
  std::vector<Event> events;
  for (int i = 0; i < trace.packet_size(); ++i) {
    const pp::TracePacket& p = trace.packet(i);
    const std::string where = absl::StrCat("packet ", i);
    if (i == 0) out.sequence_id = p.trusted_packet_sequence_id();
    if (p.trusted_packet_sequence_id() == 0) problem(where + ": on sequence 0 (no sequence)");
    if (p.trusted_packet_sequence_id() != out.sequence_id) {
      problem(absl::StrCat(where, ": on sequence ", p.trusted_packet_sequence_id(), ", not ",
                           out.sequence_id));
    }
    if (p.sequence_flags() & kIncrementalStateCleared) {
      cleared = true;
      names.clear();
      annotation_names.clear();
      string_values.clear();
    }
    if (p.has_trace_packet_defaults())
      default_clock = p.trace_packet_defaults().timestamp_clock_id();
    for (const pp::EventName& n : p.interned_data().event_names()) {
      if (names.contains(n.iid()) && names[n.iid()] != n.name()) {
        problem(absl::StrCat(where, ": event name ", n.iid(), " interned twice"));
      }
      names[n.iid()] = n.name();
    }
    for (const pp::DebugAnnotationName& n : p.interned_data().debug_annotation_names()) {
      annotation_names[n.iid()] = n.name();
    }
    for (const pp::InternedString& s : p.interned_data().debug_annotation_string_values()) {
      string_values[s.iid()] = s.str();
    }
    if (p.has_clock_snapshot()) {
      for (const auto& c : p.clock_snapshot().clocks()) {
        if (c.clock_id() == kRealtime) out.realtime_at_origin = c.timestamp();
        if (c.clock_id() >= 64 && c.clock_id() == default_clock) {
          out.clock_origin = c.timestamp();
          clock_now = static_cast<int64_t>(c.timestamp());
          incremental = c.is_incremental();
          have_clock = true;
        }
      }
      out.primary_clock = p.clock_snapshot().primary_trace_clock();
    }
    if (p.has_track_descriptor()) {
      const pp::TrackDescriptor& d = p.track_descriptor();
      if (out.tracks.contains(d.uuid()))
        problem(absl::StrCat(where, ": track ", d.uuid(), " twice"));
      if (d.has_parent_uuid() && !out.tracks.contains(d.parent_uuid())) {
        problem(absl::StrCat(where, ": track ", d.uuid(), "'s parent not described before it"));
      }
      PerfettoTrack& t = out.tracks[d.uuid()];
      t.uuid = d.uuid();
      t.parent = d.parent_uuid();
      t.name = d.name();
      if (d.has_process()) {
        t.is_process = true;
        t.pid = d.process().pid();
        t.name = d.process().process_name();
      }
      if (d.has_thread()) {
        t.is_thread = true;
        t.pid = d.thread().pid();
        t.tid = d.thread().tid();
        t.name = d.thread().thread_name();
      }
      if (d.has_counter()) {
        t.is_counter = true;
        t.unit = d.counter().unit_name();
      }
    }
    if (!p.has_track_event()) continue;
    const pp::TrackEvent& e = p.track_event();
    const bool uses_interned = e.has_name_iid() || e.debug_annotations_size() > 0;
    if (uses_interned && (!cleared || !(p.sequence_flags() & kNeedsIncrementalState))) {
      problem(where + ": uses interned data without the sequence's incremental state");
    }
    if (!have_clock || p.has_timestamp_clock_id()) problem(where + ": not on the snapshot's clock");
    if (!out.tracks.contains(e.track_uuid())) {
      problem(absl::StrCat(where, ": track ", e.track_uuid(), " not described before"));
      continue;
    }
    Event ev;
    // An incremental clock: each timestamp is a signed delta from the previous one on it.
    clock_now += incremental ? static_cast<int64_t>(p.timestamp())
                             : static_cast<int64_t>(p.timestamp()) - clock_now;
    ev.ns = out.realtime_at_origin +
            static_cast<uint64_t>(clock_now - static_cast<int64_t>(out.clock_origin));
    ev.order = static_cast<size_t>(i);
    ev.track = e.track_uuid();
    ev.event = &e;
    if (e.has_name()) {
      ev.name = e.name();
    } else if (e.type() == pp::TrackEvent::TYPE_SLICE_BEGIN ||
               e.type() == pp::TrackEvent::TYPE_INSTANT) {
      if (!names.contains(e.name_iid())) {
        problem(absl::StrCat(where, ": name ", e.name_iid(), " not interned"));
      }
      ev.name = names[e.name_iid()];
    }
    for (const pp::DebugAnnotation& a : e.debug_annotations()) {
      if (!annotation_names.contains(a.name_iid())) {
        problem(absl::StrCat(where, ": annotation name ", a.name_iid(), " not interned"));
      }
      ev.args[annotation_names[a.name_iid()]] = ValueText(a, string_values, &out.problems);
    }
    events.push_back(std::move(ev));
  }

  // In time order, as a reader sorts them (file order among equal times): the slices' stacks.
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.ns < b.ns; });
  std::map<uint64_t, std::vector<PerfettoSlice>> open;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> active_flows;  // id -> (track, start)
  for (Event& ev : events) {
    PerfettoTrack& t = out.tracks[ev.track];
    const pp::TrackEvent& e = *ev.event;
    switch (e.type()) {
      case pp::TrackEvent::TYPE_SLICE_BEGIN: {
        PerfettoSlice s;
        s.name = ev.name;
        s.start = ev.ns;
        s.args = std::move(ev.args);
        s.flows.assign(e.flow_ids().begin(), e.flow_ids().end());
        s.terminating_flows.assign(e.terminating_flow_ids().begin(),
                                   e.terminating_flow_ids().end());
        const std::pair<uint64_t, uint64_t> here{ev.track, ev.ns};
        auto arrow_to_here = [&](uint64_t id) {
          auto it = active_flows.find(id);
          if (it == active_flows.end()) return false;
          out.arrows.push_back({it->second.first, it->second.second, ev.track, ev.ns});
          return true;
        };
        for (uint64_t id : e.flow_ids()) {
          arrow_to_here(id);
          active_flows[id] = here;
        }
        for (uint64_t id : e.terminating_flow_ids()) {
          if (arrow_to_here(id)) active_flows.erase(id);
        }
        if (e.has_legacy_event() && e.legacy_event().has_bind_id()) {
          const uint64_t id = e.legacy_event().bind_id();
          switch (e.legacy_event().flow_direction()) {
            case pp::TrackEvent::LegacyEvent::FLOW_OUT:
              active_flows[id] = here;
              s.flows.push_back(id);
              break;
            case pp::TrackEvent::LegacyEvent::FLOW_IN:
              arrow_to_here(id);
              s.terminating_flows.push_back(id);
              break;
            case pp::TrackEvent::LegacyEvent::FLOW_INOUT:
              arrow_to_here(id);
              active_flows[id] = here;
              s.flows.push_back(id);
              break;
            default:
              problem("a flow without a direction");
          }
        }
        open[ev.track].push_back(std::move(s));
        break;
      }
      case pp::TrackEvent::TYPE_SLICE_END: {
        std::vector<PerfettoSlice>& stack = open[ev.track];
        if (stack.empty()) {
          problem(absl::StrCat("an END on track ", t.name, " at ", ev.ns, " with no BEGIN"));
          break;
        }
        PerfettoSlice s = std::move(stack.back());
        stack.pop_back();
        s.end = ev.ns;
        t.slices.push_back(std::move(s));
        break;
      }
      case pp::TrackEvent::TYPE_INSTANT: {
        PerfettoSlice s;
        s.name = ev.name;
        s.start = s.end = ev.ns;
        s.args = std::move(ev.args);
        t.instants.push_back(std::move(s));
        break;
      }
      case pp::TrackEvent::TYPE_COUNTER: {
        if (!t.is_counter) problem(absl::StrCat("a counter value on ", t.name));
        t.counter_values.emplace_back(ev.ns, e.double_counter_value());
        if (e.extra_double_counter_track_uuids_size() != e.extra_double_counter_values_size()) {
          problem("extra counter tracks and values differ in number");
        }
        for (int i = 0; i < e.extra_double_counter_track_uuids_size(); ++i) {
          auto extra = out.tracks.find(e.extra_double_counter_track_uuids(i));
          if (extra == out.tracks.end() || !extra->second.is_counter) {
            problem("an extra counter value on a track that is no counter");
            continue;
          }
          if (i < e.extra_double_counter_values_size()) {
            extra->second.counter_values.emplace_back(ev.ns, e.extra_double_counter_values(i));
          }
        }
        break;
      }
      default:
        problem(absl::StrCat("an event of type ", e.type()));
    }
  }
  for (const auto& [uuid, stack] : open) {
    if (!stack.empty())
      problem(absl::StrCat(stack.size(), " slices never ended on ", out.tracks[uuid].name));
  }
  for (auto& [uuid, t] : out.tracks) {
    std::stable_sort(
        t.slices.begin(), t.slices.end(),
        [](const PerfettoSlice& a, const PerfettoSlice& b) { return a.start < b.start; });
  }
  if (out.primary_clock != kRealtime) problem("the trace's primary clock is not CLOCK_REALTIME");
  return out;
}

}  // namespace profd::testing
