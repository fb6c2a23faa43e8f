// Message sizes on the control plane (profctl <-> profd), shared by both sides so that profd
// never builds an answer profctl cannot take. gRPC's default 4 MiB receive limit made
// `profctl agents` fail for everyone once the agents' answer grew past it (issue 12).
#pragma once

#include <cstddef>

namespace profd::v1 {

// The largest list profd answers (ListAgents, ListCaptures): entries past it are left out and
// counted in the answer's `omitted`.
inline constexpr size_t kMaxListAnswerBytes = 16u << 20;
// What profctl accepts in one message, and the most profd sends: above every answer profd
// builds (lists, a capture's progress, 1 MiB trace chunks), with room to spare.
inline constexpr size_t kMaxControlMessageBytes = 64u << 20;
// What profd accepts in one message from a client: requests are small, and ImportTrace sends
// its file in chunks of 1 MiB.
inline constexpr size_t kMaxControlRequestBytes = 4u << 20;

}  // namespace profd::v1
