#include "agent/wire/agent_messages.h"

namespace profagent::wire {
namespace {

// profd.v1.AgentMessage
constexpr uint32_t kAgentHello = 1, kAgentHeartbeat = 2, kAgentCaptureStatus = 3;

void WriteCounters(ProtoWriter& w, uint32_t field, const DeviceCounters& c) {
  size_t at = w.BeginNested(field);
  w.Varint(1, c.device);
  w.Varint(2, c.kernel_launches);
  w.Varint(3, c.graph_launches);
  w.Varint(4, c.memory_allocated_bytes);
  w.Varint(5, c.memory_peak_bytes);
  w.EndNested(at);
}

void WriteCuptiSharing(ProtoWriter& w, uint32_t field, const CuptiSharing& s) {
  size_t at = w.BeginNested(field);
  w.Varint(1, static_cast<uint32_t>(s.mode));
  w.String(2, s.detail);
  for (const std::string& c : s.clients) w.String(3, c);
  w.Bool(4, s.other_tracing);
  w.String(5, s.other_tracer);
  for (const std::string& o : s.interposed) w.String(6, o);
  for (const std::string& o : s.not_interposed) w.String(7, o);
  w.Bool(8, s.native_multiple_subscribers);
  w.Varint(9, s.captures_cut_short);
  w.EndNested(at);
}

bool DecodeStartCapture(std::string_view data, StartCapture* s) {
  ProtoReader r(data);
  while (r.Next()) {
    switch (r.field()) {
      case 1:
        s->capture_id = std::string(r.bytes());
        break;
      case 2:
        s->duration_ms = r.varint();
        break;
      case 3:
        if (r.wire_type() == 0) {
          s->kinds.push_back(static_cast<ActivityKind>(r.varint()));
        } else {  // packed
          // Packed varints carry no tags: decode them directly.
          uint64_t v = 0;
          int shift = 0;
          for (char ch : r.bytes()) {
            uint8_t b = static_cast<uint8_t>(ch);
            v |= static_cast<uint64_t>(b & 0x7f) << shift;
            if (b & 0x80) {
              shift += 7;
            } else {
              s->kinds.push_back(static_cast<ActivityKind>(v));
              v = 0;
              shift = 0;
            }
          }
        }
        break;
      case 4:
        s->start_at_realtime_ns = r.varint();
        break;
      case 5:
        s->max_events = r.varint();
        break;
      case 6:
        s->flush_interval_ms = r.varint();
        break;
      case 7:
        s->requested_realtime_ns = r.varint();
        break;
      case 8:
        s->before_ms = r.varint();
        break;
      default:
        break;
    }
  }
  return r.ok();
}

}  // namespace

void WriteDeviceInfo(ProtoWriter& w, uint32_t field, const DeviceInfo& d) {
  size_t at = w.BeginNested(field);
  w.Varint(1, d.ordinal);
  w.String(2, d.name);
  w.String(3, d.uuid);
  w.Varint(4, d.compute_major);
  w.Varint(5, d.compute_minor);
  w.Varint(6, d.multiprocessors);
  w.Varint(7, d.global_memory_bytes);
  w.Varint(8, d.max_threads_per_multiprocessor);
  w.Varint(9, d.max_blocks_per_multiprocessor);
  w.Varint(10, d.max_registers_per_multiprocessor);
  w.Varint(11, d.max_shared_memory_per_multiprocessor);
  w.Varint(12, d.warp_size);
  w.Varint(13, d.max_registers_per_block);
  w.Varint(14, d.max_shared_memory_per_block);
  w.EndNested(at);
}

void EncodeHello(const Hello& h, std::string* out) {
  out->clear();
  ProtoWriter w(out);
  size_t at = w.BeginNested(kAgentHello);
  w.String(1, h.agent_version);
  w.Varint(2, h.pid);
  w.String(3, h.hostname);
  w.String(4, h.pod_name);
  w.String(5, h.pod_namespace);
  w.String(6, h.container_name);
  w.Varint(7, h.cupti_version);
  w.Varint(8, h.cuda_driver_version);
  for (const DeviceInfo& d : h.devices) WriteDeviceInfo(w, 9, d);
  w.Bool(10, h.injected);
  w.Varint(11, h.start_realtime_ns);
  w.Bool(12, h.distributed);
  w.Varint(13, h.rank);
  w.Varint(14, h.world_size);
  w.Varint(15, h.local_rank);
  w.EndNested(at);
}

void EncodeHeartbeat(const Heartbeat& hb, std::string* out) {
  out->clear();
  ProtoWriter w(out);
  size_t at = w.BeginNested(kAgentHeartbeat);
  w.Varint(1, hb.realtime_ns);
  for (const DeviceCounters& c : hb.devices) WriteCounters(w, 2, c);
  for (const DeviceInfo& d : hb.device_infos) WriteDeviceInfo(w, 3, d);
  w.Varint(4, hb.launch_sample_every);
  if (hb.has_cupti_sharing) WriteCuptiSharing(w, 5, hb.cupti_sharing);
  w.Varint(6, static_cast<uint32_t>(hb.launch_counting));
  w.Varint(7, hb.counters_paused ? 1 : 0);
  if (hb.recorder.on || !hb.recorder.detail.empty()) {
    const RecorderState& rec = hb.recorder;
    size_t nested = w.BeginNested(8);
    w.Bool(1, rec.on);
    w.Varint(2, rec.seconds);
    w.Varint(3, rec.max_bytes);
    w.Varint(4, rec.bytes);
    w.Varint(5, rec.covered_since_realtime_ns);
    w.Varint(6, rec.evicted_records);
    w.Bool(7, rec.paused);
    w.String(8, rec.detail);
    w.Varint(9, rec.duty_on_ms);
    w.Varint(10, rec.duty_period_ms);
    w.EndNested(nested);
  }
  w.EndNested(at);
}

void EncodeCaptureStatus(const CaptureStatus& s, std::string* out) {
  out->clear();
  ProtoWriter w(out);
  size_t at = w.BeginNested(kAgentCaptureStatus);
  w.String(1, s.capture_id);
  w.Varint(2, static_cast<uint32_t>(s.state));
  w.Varint(3, static_cast<uint32_t>(s.error));
  w.String(4, s.message);
  w.Varint(5, s.enabled_realtime_ns);
  w.Varint(6, s.disabled_realtime_ns);
  w.Varint(7, s.events);
  w.Varint(8, s.dropped_records);
  w.Varint(9, s.batches);
  w.Bool(10, s.truncated);
  w.Varint(11, s.recorded_from_realtime_ns);
  w.EndNested(at);
}

bool DecodeDaemonMessage(std::string_view data, DaemonCommand* out) {
  *out = DaemonCommand{};
  ProtoReader r(data);
  while (r.Next()) {
    if (r.wire_type() != 2) continue;
    ProtoReader body(r.bytes());
    switch (r.field()) {
      case 1:  // HelloAck
        out->kind = DaemonCommand::Kind::kHelloAck;
        while (body.Next()) {
          if (body.field() == 1) out->daemon_version = std::string(body.bytes());
          if (body.field() == 2) out->heartbeat_interval_ms = body.varint();
        }
        if (!body.ok()) return false;
        break;
      case 2:  // StartCapture
        out->kind = DaemonCommand::Kind::kStartCapture;
        if (!DecodeStartCapture(r.bytes(), &out->start)) return false;
        break;
      case 3:  // StopCapture
        out->kind = DaemonCommand::Kind::kStopCapture;
        while (body.Next()) {
          if (body.field() == 1) out->stop_capture_id = std::string(body.bytes());
        }
        if (!body.ok()) return false;
        break;
      case 4:  // SetRecorder
        out->kind = DaemonCommand::Kind::kSetRecorder;
        while (body.Next()) {
          if (body.field() == 1) out->recorder.on = body.varint() != 0;
          if (body.field() == 2) out->recorder.seconds = body.varint();
          if (body.field() == 3) out->recorder.max_bytes = body.varint();
          if (body.field() == 4) out->recorder.duty_on_ms = body.varint();
          if (body.field() == 5) out->recorder.duty_period_ms = body.varint();
        }
        if (!body.ok()) return false;
        break;
      default:
        break;
    }
  }
  return r.ok();
}

}  // namespace profagent::wire
