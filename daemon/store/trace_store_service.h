// The profd.v1.TraceStore gRPC service: lists, shows and streams captures from the spool (not yet
// uploaded) and the store, and imports trace files through the spool like any capture. Handlers
// run on gRPC's threads; store reads happen there too (they are what the caller waits for), and
// uploads stay on the spool's own thread.
#pragma once

#include <string>

#include "daemon/store/spool.h"
#include "daemon/store/trace_store.h"
#include "profd/v1/store.grpc.pb.h"

namespace profd::store {

class TraceStoreService final : public v1::TraceStore::Service {
 public:
  // store and spool may be null when the store could not be opened: every call then fails with
  // UNAVAILABLE and `unavailable_reason`.
  TraceStoreService(TraceStore* store, Spool* spool, std::string hostname,
                    std::string unavailable_reason = "");

  grpc::Status ListTraces(grpc::ServerContext* context, const v1::ListTracesRequest* request,
                          v1::ListTracesResponse* response) override;
  grpc::Status ShowTrace(grpc::ServerContext* context, const v1::ShowTraceRequest* request,
                         v1::ShowTraceResponse* response) override;
  grpc::Status GetTrace(grpc::ServerContext* context, const v1::GetTraceRequest* request,
                        grpc::ServerWriter<v1::TraceChunk>* writer) override;
  grpc::Status ImportTrace(grpc::ServerContext* context,
                           grpc::ServerReader<v1::ImportTraceChunk>* reader,
                           v1::ImportTraceResponse* response) override;
  grpc::Status GetSpoolStatus(grpc::ServerContext* context,
                              const v1::GetSpoolStatusRequest* request,
                              v1::SpoolStatus* response) override;

 private:
  grpc::Status Unavailable() const;
  // The capture from the spool (with its folder) or the store. deadline: the call's, for every
  // store request made for it.
  absl::StatusOr<v1::StoredTrace> Find(const std::string& capture_id, std::string* spool_folder,
                                       absl::Time deadline);
  absl::Status ReadFile(const v1::StoredTrace& trace, const std::string& spool_folder,
                        const std::string& file, const ChunkSink& sink, absl::Time deadline);

  TraceStore* const store_;
  Spool* const spool_;
  const std::string hostname_;
  const std::string unavailable_reason_;
};

}  // namespace profd::store
