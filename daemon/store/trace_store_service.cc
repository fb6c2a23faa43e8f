#include "daemon/store/trace_store_service.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/capture_id.h"
#include "common/grpc_status.h"
#include "daemon/log.h"
#include "daemon/store/byte_size.h"
#include "daemon/store/local_bucket.h"
#include "daemon/store/trace_import.h"

namespace profd::store {

namespace {

constexpr char kComponent[] = "store";
constexpr size_t kChunkBytes = 1 << 20;

// The call's deadline, for the store requests made on its behalf: when profctl gives up, profd
// stops waiting on the store too, so a silent store cannot pile up one thread per call.
absl::Time DeadlineOf(const grpc::ServerContext* context) {
  if (context == nullptr) return absl::InfiniteFuture();
  const auto deadline = context->deadline();
  // gRPC's "no deadline" is the far end of system_clock: beyond what absl::FromChrono takes.
  if (deadline >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

}  // namespace

TraceStoreService::TraceStoreService(TraceStore* store, Spool* spool, std::string hostname,
                                     std::string unavailable_reason)
    : store_(store),
      spool_(spool),
      hostname_(std::move(hostname)),
      unavailable_reason_(std::move(unavailable_reason)) {}

grpc::Status TraceStoreService::Unavailable() const {
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "profd has no trace store: " + unavailable_reason_);
}

grpc::Status TraceStoreService::ListTraces(grpc::ServerContext* context,
                                           const v1::ListTracesRequest* request,
                                           v1::ListTracesResponse* response) {
  if (store_ == nullptr || spool_ == nullptr) return Unavailable();
  const size_t limit = request->limit() == 0 ? 50 : request->limit();
  std::vector<v1::StoredTrace> all;
  std::set<std::string> seen;
  TraceFilter filter;
  filter.hostname = request->hostname();
  filter.pod = request->pod();
  filter.alert = request->alert();
  filter.fleet_id = request->fleet_id();
  if (request->since_unix_ns() != 0) filter.since = absl::FromUnixNanos(request->since_unix_ns());
  filter.limit = limit;
  filter.deadline = DeadlineOf(context);
  absl::StatusOr<std::vector<v1::StoredTrace>> stored = store_->List(filter);
  if (stored.ok()) {
    for (v1::StoredTrace& t : *stored) {
      seen.insert(t.capture_id());
      all.push_back(std::move(t));
    }
  } else {
    response->set_store_error(std::string(stored.status().message()));
  }
  for (v1::StoredTrace& t : spool_->Pending()) {
    if (TraceMatches(t, filter) && !seen.count(t.capture_id())) all.push_back(std::move(t));
  }
  std::sort(all.begin(), all.end(), [](const v1::StoredTrace& a, const v1::StoredTrace& b) {
    return a.started_unix_ns() != b.started_unix_ns() ? a.started_unix_ns() > b.started_unix_ns()
                                                      : a.capture_id() > b.capture_id();
  });
  if (all.size() > limit) all.resize(limit);
  for (v1::StoredTrace& t : all) *response->add_traces() = std::move(t);
  response->set_store_uri(store_->uri());
  return grpc::Status::OK;
}

absl::StatusOr<v1::StoredTrace> TraceStoreService::Find(const std::string& capture_id,
                                                        std::string* spool_folder,
                                                        absl::Time deadline) {
  if (absl::Status s = ValidateCaptureId(capture_id); !s.ok()) return s;
  if (auto pending = spool_->FindPending(capture_id)) {
    *spool_folder = pending->second;
    return pending->first;
  }
  spool_folder->clear();
  return store_->Get(capture_id, deadline);
}

absl::Status TraceStoreService::ReadFile(const v1::StoredTrace& trace,
                                         const std::string& spool_folder, const std::string& file,
                                         const ChunkSink& sink, absl::Time deadline) {
  if (!spool_folder.empty()) {
    LocalBucket folder(spool_folder);
    absl::Status s = folder.Read(file, sink, deadline);
    // Uploaded (and removed from the spool) meanwhile: read it from the store.
    if (!absl::IsNotFound(s)) return s;
  }
  v1::StoredTrace stored = trace;
  if (!spool_folder.empty()) {
    absl::StatusOr<v1::StoredTrace> found = store_->Get(trace.capture_id(), deadline);
    if (!found.ok()) return found.status();
    stored = *found;
  }
  return store_->Read(stored, file, sink, deadline);
}

grpc::Status TraceStoreService::ShowTrace(grpc::ServerContext* context,
                                          const v1::ShowTraceRequest* request,
                                          v1::ShowTraceResponse* response) {
  if (store_ == nullptr || spool_ == nullptr) return Unavailable();
  const absl::Time deadline = DeadlineOf(context);
  std::string folder;
  absl::StatusOr<v1::StoredTrace> trace = Find(request->capture_id(), &folder, deadline);
  if (!trace.ok()) return ToGrpcStatus(trace.status());
  auto append_to = [](std::string* out) {
    return [out](absl::string_view chunk) {
      out->append(chunk.data(), chunk.size());
      return absl::OkStatus();
    };
  };
  absl::Status s = ReadFile(*trace, folder, kManifestFile,
                            append_to(response->mutable_manifest_json()), deadline);
  if (!s.ok()) return ToGrpcStatus(s);
  bool has_summary = std::any_of(trace->files().begin(), trace->files().end(),
                                 [](const v1::StoredFile& f) { return f.name() == kSummaryFile; });
  if (has_summary) {
    s = ReadFile(*trace, folder, kSummaryFile, append_to(response->mutable_summary_json()),
                 deadline);
    if (!s.ok()) return ToGrpcStatus(s);
  }
  *response->mutable_trace() = *trace;
  return grpc::Status::OK;
}

grpc::Status TraceStoreService::GetTrace(grpc::ServerContext* context,
                                         const v1::GetTraceRequest* request,
                                         grpc::ServerWriter<v1::TraceChunk>* writer) {
  if (store_ == nullptr || spool_ == nullptr) return Unavailable();
  const absl::Time deadline = DeadlineOf(context);
  std::string folder;
  absl::StatusOr<v1::StoredTrace> trace = Find(request->capture_id(), &folder, deadline);
  if (!trace.ok()) return ToGrpcStatus(trace.status());
  std::vector<v1::StoredFile> files;
  for (const v1::StoredFile& f : trace->files()) {
    if (request->files().empty() || std::find(request->files().begin(), request->files().end(),
                                              f.name()) != request->files().end()) {
      files.push_back(f);
    }
  }
  for (const std::string& wanted : request->files()) {
    if (std::none_of(files.begin(), files.end(),
                     [&](const v1::StoredFile& f) { return f.name() == wanted; })) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("capture ", trace->capture_id(), " has no file ", wanted));
    }
  }
  bool first = true;
  for (const v1::StoredFile& f : files) {
    v1::TraceChunk chunk;
    if (first) *chunk.mutable_trace() = *trace;
    first = false;
    *chunk.mutable_file() = f;
    auto flush = [&]() -> absl::Status {
      if (context->IsCancelled()) return absl::CancelledError("the client went away");
      if (!writer->Write(chunk)) return absl::CancelledError("the client went away");
      chunk.Clear();
      return absl::OkStatus();
    };
    absl::Status s = ReadFile(
        *trace, folder, f.name(),
        [&](absl::string_view data) {
          while (!data.empty()) {
            size_t room = kChunkBytes - chunk.data().size();
            size_t n = std::min(room, data.size());
            chunk.mutable_data()->append(data.data(), n);
            data.remove_prefix(n);
            if (chunk.data().size() == kChunkBytes) {
              if (absl::Status w = flush(); !w.ok()) return w;
            }
          }
          return absl::OkStatus();
        },
        deadline);
    if (!s.ok()) return ToGrpcStatus(s);
    chunk.set_end_of_file(true);
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
  }
  return grpc::Status::OK;
}

grpc::Status TraceStoreService::ImportTrace(grpc::ServerContext*,
                                            grpc::ServerReader<v1::ImportTraceChunk>* reader,
                                            v1::ImportTraceResponse* response) {
  if (store_ == nullptr || spool_ == nullptr) return Unavailable();
  v1::ImportTraceChunk chunk;
  if (!reader->Read(&chunk) || !chunk.has_header()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "ImportTrace: the first message must carry the header (file name)");
  }
  const v1::ImportTraceHeader header = chunk.header();
  const std::string id = NewCaptureId(hostname_, absl::Now());
  // On disk at the peak: the upload and its gzip copy, never much more than twice the upload.
  // The header's size only lets an honest client be refused up front; what counts against
  // --spool_max_bytes is what arrives: the reservation grows before each chunk is written, so a
  // client that declares 0 (or lies) is stopped at the cap, not past it.
  uint64_t reserved = header.bytes() > UINT64_MAX / 2 ? UINT64_MAX : header.bytes() * 2;
  absl::StatusOr<std::string> folder = spool_->Reserve(id, reserved);
  if (!folder.ok()) return ToGrpcStatus(folder.status());

  const std::string upload = *folder + "/.upload";
  absl::Status status;
  uint64_t received = 0;
  {
    std::ofstream out(upload, std::ios::binary | std::ios::trunc);
    while (reader->Read(&chunk)) {
      if (chunk.has_header()) {
        status = absl::InvalidArgumentError("ImportTrace: a second header in the stream");
        break;
      }
      received += chunk.data().size();
      if (received * 2 > reserved) {
        // Grow ahead by a quarter, so the lock is not taken for every chunk; near the cap, only
        // as far as needed.
        uint64_t want = std::max(received * 2, reserved + reserved / 4);
        absl::Status room = spool_->Grow(id, want);
        if (!room.ok() && want > received * 2) {
          want = received * 2;
          room = spool_->Grow(id, want);
        }
        if (!room.ok()) {
          status = absl::ResourceExhaustedError(absl::StrCat(
              "import of ", header.file_name(), " stopped after ", FormatBytes(received),
              " (the client declared ", FormatBytes(header.bytes()),
              "; an import takes twice its size in the spool while it is converted): ",
              room.message()));
          break;
        }
        reserved = want;
      }
      out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    }
    out.close();
    if (status.ok() && !out) status = absl::InternalError("cannot write " + upload);
  }
  absl::StatusOr<ImportResult> imported;
  if (status.ok()) {
    ImportRequest request;
    request.input_path = upload;
    request.original_name = header.file_name();
    request.label = header.label();
    request.hostname = hostname_;
    request.capture_id = id;
    request.folder = *folder;
    imported = BuildImportedCapture(request);
    status = imported.status();
  }
  std::error_code ec;
  std::filesystem::remove(upload, ec);
  if (!status.ok()) {
    spool_->Abandon(id);
    if (status.code() == absl::StatusCode::kInternal) {
      // profd's own disk failed it: the spool paths go to the log, for whoever runs profd; the
      // user gets what happened to their file and where to look.
      LogWarning(kComponent, "import of %s failed: %s", header.file_name(), status.message());
      status = absl::InternalError(absl::StrCat(
          "profd could not keep ", header.file_name(),
          ": writing it into profd's spool failed (disk full or not writable; `profctl spool` "
          "shows its space, profd's log names the file)"));
    }
    return ToGrpcStatus(status);
  }
  absl::StatusOr<v1::StoredTrace> queued = spool_->Submit(imported->described);
  if (!queued.ok()) {
    spool_->Abandon(id);
    return ToGrpcStatus(queued.status());
  }
  LogInfo(kComponent, "imported %s as capture %s (%d events, %d kernels)", header.file_name(), id,
          imported->events, imported->kernels);
  *response->mutable_trace() = *queued;
  response->set_events(imported->events);
  response->set_kernels(imported->kernels);
  return grpc::Status::OK;
}

grpc::Status TraceStoreService::GetSpoolStatus(grpc::ServerContext*,
                                               const v1::GetSpoolStatusRequest*,
                                               v1::SpoolStatus* response) {
  if (store_ == nullptr || spool_ == nullptr) return Unavailable();
  SpoolStats s = spool_->stats();
  response->set_spool_dir(spool_->dir());
  response->set_store_uri(store_->uri());
  response->set_bytes(s.bytes);
  response->set_capacity_bytes(s.capacity_bytes);
  response->set_pending(s.pending);
  response->set_reserved(s.reserved);
  response->set_uploaded_total(s.uploaded_total);
  response->set_upload_failures_total(s.upload_failures_total);
  response->set_refused_total(s.refused_total);
  response->set_last_error(s.last_error);
  if (s.next_attempt != absl::InfinitePast()) {
    response->set_next_attempt_unix_ns(absl::ToUnixNanos(s.next_attempt));
  }
  response->set_waiting_for_room(s.waiting_for_room);
  response->set_write_failures_total(s.write_failures_total);
  response->set_last_write_error(s.last_write_error);
  for (v1::StoredTrace& t : spool_->WaitingForRoom()) *response->add_waiting() = std::move(t);
  return grpc::Status::OK;
}

}  // namespace profd::store
