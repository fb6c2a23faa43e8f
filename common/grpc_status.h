// absl::Status -> grpc::Status for the gRPC services (profd.v1.Profd, profd.v1.TraceStore): the
// codes are the same numbers, the message goes as it is.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace profd {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace profd
