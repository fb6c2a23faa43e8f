// Writes one process's events as a Perfetto trace: a stream of TracePacket messages (the
// `repeated TracePacket packet = 1` of perfetto.protos.Trace), gzip-compressed, which
// ui.perfetto.dev and trace_processor open. Encoded by hand, field by field, straight into the
// file's buffer (no message objects), from the field numbers of Perfetto's published protos;
// tests/support/perfetto/perfetto_subset.proto holds the subset used and the tests decode every
// trace with it. docs/TRACE_FORMAT.md "Perfetto" says what goes where.
//
// What makes it small: one packet sequence whose incremental state holds every name once
// (interned event and annotation names), track ids counted up from the sequence's own base,
// timestamps on a sequence-scoped clock that starts just before the capture (5-6 byte varints
// instead of 9), and begin/end slices instead of JSON text.
//
// Files of several processes (and several nodes) open together: each file's packet sequence id,
// track uuids and flow ids start from a base derived from its process (host, capture, pid), so
// the traces of one capture concatenated (`cat trace-*.pftrace.gz > all.pftrace.gz`) read as one
// trace with every process's rows and arrows apart.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/trace/trace_writer.h"

namespace profd {

class PerfettoTraceWriter : public TraceWriter {
 public:
  // The sequence-scoped, incremental clock of the packets' timestamps: a packet's time on it is
  // its CLOCK_REALTIME ns minus the process's base_time_ns plus kClockOrigin (events up to ~68 s
  // before the base keep their exact time; earlier ones are written at the origin), and its
  // timestamp field the difference from the previous packet's (mostly 1-3 byte varints).
  static constexpr uint32_t kClockId = 64;
  static constexpr uint64_t kClockOrigin = uint64_t{1} << 36;
  // Bits of a file's sequence id (its packets' trusted_packet_sequence_id, never 0), which also
  // tops its track uuids (sequence id << kTrackBits | n) and flow ids (<< 32 | correlation id).
  static constexpr int kSequenceBits = 21;  // a 3-byte varint
  static constexpr int kTrackBits = 14;
  static uint32_t SequenceIdOf(const TraceProcess& process);
  uint32_t sequence_id() const { return sequence_id_; }

  // Creates (truncates) path and writes the sequence's first packets: the clock, the
  // annotation names and the process's track.
  // What the sequence interns is bounded however many distinct values the agent sends: each
  // table (batch names, profd's own names, argument values) up to max_interned entries; past
  // that, names and values are written inline.
  static constexpr size_t kMaxInterned = 1 << 16;
  static absl::StatusOr<std::unique_ptr<PerfettoTraceWriter>> Create(
      const std::string& path, const TraceProcess& process, int gzip_level = 1,
      BytesObserver on_bytes = nullptr, size_t max_interned = kMaxInterned);

  // One counter track per measured counter under the GPU's track; one packet per sample sets
  // them all (the first counter's value, the others as its extra counter values).
  absl::Status WriteCounters(uint32_t device, std::span<const GpuCounterReading> readings) override;
  // An instant "profd capture" on the process's track with the capture's facts, and one
  // "device properties" on each GPU's track; then closes the file.
  absl::Status Finish(const Footer& footer) override;

 private:
  PerfettoTraceWriter(std::unique_ptr<TraceFile> file, const TraceProcess& process,
                      size_t max_interned)
      : TraceWriter(std::move(file), process),
        max_interned_(max_interned),
        sequence_id_(SequenceIdOf(process)),
        next_uuid_((uint64_t{sequence_id_} << kTrackBits) + 1) {}

  // A launch -> GPU arrow's id: the correlation id under the file's own bits.
  uint64_t FlowId(uint32_t correlation) const { return uint64_t{sequence_id_} << 32 | correlation; }

  // The tracks: small uuids given in order of first use, each described (a TrackDescriptor
  // packet) before its first event.
  enum class Track : uint8_t { kThread, kGpu, kStream, kMemory, kSync, kCounter };
  uint64_t TrackOf(Track kind, uint32_t a, uint32_t b = 0);
  uint64_t ThreadTrack(uint32_t tid) { return TrackOf(Track::kThread, tid); }
  void DescribeTrack(uint64_t uuid, Track kind, uint32_t a, uint32_t b, size_t lane = 0);
  // A reader pairs a track's ENDs with its BEGINs in time order, so a track's slices must nest.
  // A stream's work and a stream's waits do not always (overlapping records, waits of several
  // threads): each such row has lanes, and a slice goes on the first lane whose slices all ended
  // by its start; lane k > 0 is the row's track named "... (overlap k)". Up to kMaxLanes.
  static constexpr size_t kMaxLanes = 8;
  uint64_t LaneOf(Track kind, uint32_t a, uint32_t b, uint64_t start, uint64_t end);
  // A host thread's slices (API calls, NVTX ranges, CUPTI overhead) nest most of the time (a
  // range around the calls it makes) but not always (a range pushed on one call and popped on
  // another, overhead records that straddle a call): a slice stays on a lane when it nests in
  // the lane's open slices, else it goes to the next lane ("thread T (overlap k)", a child of
  // the thread's track). Out of time order, a lane takes it only after all its slices ended.
  uint64_t ThreadLaneOf(uint32_t tid, uint64_t start, uint64_t end);

  // Packets. BeginPacket makes room for max_bytes and opens the packet; EndPacket closes it.
  char* BeginPacket(size_t max_bytes);
  void EndPacket(char* packet, char* p);
  char* PutEventPacketHeader(char* p, uint64_t ns, bool interned = true);
  // Interned event names: the batch's strings by their ids, profd's own names by text.
  uint64_t NameIid(uint32_t name_id) const { return 2 * uint64_t{name_id} + 2; }
  char* PutInternedName(char* p, uint32_t name_id, const StringTable& names);
  uint64_t OwnNameIid(const std::string& name, std::string* intern);
  // A name for an event: its interned id, and the text when this packet must intern it; iid 0:
  // the text is written in the event itself.
  struct Name {
    uint64_t iid = 0;
    std::string_view intern;  // empty: interned before
    bool new_name = false;
  };
  Name BatchName(uint32_t name_id, const StringTable& names);
  Name OwnName(const std::string& text);
  // A string argument whose value is interned (grid, block, copy and memory kinds: a few values
  // over and over): the value's iid, and the value into this packet's interned data when new.
  uint64_t StringValueIid(std::string_view text);
  char* PutStringValue(char* p, uint64_t annotation, std::string_view text);
  // Grid and block, "[x,y,z]" as the JSON trace writes them, interned.
  char* PutDims(char* p, uint64_t annotation, int32_t x, int32_t y, int32_t z);
  // The packet's interned data: the event's name when new, and the new string values.
  char* PutInterned(char* p, const Name& name);
  // One packet of an event with a name (a slice's BEGIN, an instant): its flows and the
  // annotations `annotate` writes (at most annotation_bytes).
  template <typename Annotate>
  void WriteNamedEvent(uint64_t type, uint64_t track, uint64_t ns, const Name& name, uint64_t flow,
                       uint64_t terminating_flow, size_t annotation_bytes, Annotate annotate);
  // The BEGIN packet, then the END packet, on track.
  template <typename Annotate>
  void WriteSlice(uint64_t track, uint64_t start, uint64_t end, const Name& name, uint64_t flow,
                  uint64_t terminating_flow, size_t annotation_bytes, Annotate annotate);
  void WriteKernel(const v1::Kernel& k, const StringTable& names) override;
  void WriteMemcpy(const v1::Memcpy& m) override;
  void WriteMemset(const v1::Memset& m) override;
  void WriteApiCall(const v1::ApiCall& a, const StringTable& names) override;
  void WriteSync(const v1::Synchronization& s) override;
  void WriteMarker(const v1::Marker& m, const StringTable& names) override;
  void WriteMemoryOp(const v1::MemoryOp& m) override;
  void WriteOverhead(const v1::Overhead& o) override;
  // An id defined again with another text after its first text was interned: its next use
  // interns the new text under a new iid (a reader keeps an iid's first definition).
  void WriteStrings(const v1::EventBatch& batch) override;

  uint64_t Clock(uint64_t ns) const;

  // (kind, tid | device, stream | counter) -> uuid
  using TrackKey = std::tuple<Track, uint32_t, uint32_t>;
  absl::flat_hash_map<TrackKey, uint64_t> tracks_;
  TrackKey last_track_key_;
  uint64_t last_track_uuid_ = 0;
  struct Lane {
    uint64_t uuid = 0;
    uint64_t end = 0;  // the latest end of its slices
  };
  absl::node_hash_map<TrackKey, std::vector<Lane>> lanes_;  // stable addresses: last_lanes_
  TrackKey last_lanes_key_;
  std::vector<Lane>* last_lanes_ = nullptr;
  struct ThreadLane {
    uint64_t uuid = 0;
    uint64_t last_start = 0;
    uint64_t end = 0;                                 // the latest end of its slices
    std::vector<std::pair<uint64_t, uint64_t>> open;  // (start, end), outermost first
  };
  static constexpr size_t kMaxNesting = 64;
  absl::flat_hash_map<uint32_t, std::vector<ThreadLane>> thread_lanes_;
  const size_t max_interned_;  // each interning table's cap (Create)
  const uint32_t sequence_id_;
  uint64_t next_uuid_;
  uint64_t process_track_ = 0;
  static constexpr uint32_t kDenseIds = 1 << 16;
  std::vector<bool> interned_dense_;            // batch string ids < kDenseIds interned
  absl::flat_hash_set<uint32_t> interned_ids_;  // the others
  bool Interned(uint32_t name_id) const;
  void ForgetInterned(uint32_t name_id);
  // Ids whose text changed after it was interned -> the iid of their current text (odd iids are
  // profd's own names, 2 * id + 2 the first texts; these count on from 2^34).
  absl::flat_hash_map<uint32_t, uint64_t> renamed_;
  uint64_t next_renamed_iid_ = uint64_t{1} << 34;
  bool names_inline_ = false;  // past max_interned_ renamed ids: every batch name inline
  absl::node_hash_map<std::string, uint64_t> own_names_;      // profd's names -> odd iids
  absl::node_hash_map<std::string, uint64_t> string_values_;  // argument values -> iids
  std::vector<const std::pair<const std::string, uint64_t>*> new_strings_;  // not yet interned
  struct DimsEntry {
    int32_t x = 0, y = 0, z = 0;
    uint64_t iid = 0;
  };
  std::array<DimsEntry, 64> dims_cache_{};  // launch shapes -> their text's iid
  uint64_t last_clock_ = kClockOrigin;      // the previous event packet's time on kClockId
  uint64_t last_ns_ = 0;  // the latest time written (the footer's instants go there)
};

}  // namespace profd
