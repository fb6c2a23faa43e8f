// Kineto's daemon protocol, the part profd speaks (what dynolog calls its IPC fabric; facts in
// ../shared/kineto-ipc.md and docs/KINETO.md). A datagram is a fixed Metadata header
// {size_t size; char type[32]} followed by `size` payload bytes. Kineto polls with "req"
// (LibkinetoRequest: int32 type mask, int32 n, int64 job id, int32 pids[n]) and reads back a "req"
// whose payload is the on-demand config text (KEY=VALUE lines), or nothing.
//
// Every number in a datagram comes from an untrusted process: DecodeKinetoDatagram checks the
// sizes against each other and against the datagram's real length before anything is believed
// (dynolog trusts `n`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace profd::kineto {

// The daemon's endpoint name inside KINETO_IPC_SOCKET_DIR; Kineto hard-codes it.
inline constexpr char kDaemonEndpoint[] = "dynolog";
// sizeof(Metadata) on LP64 (x86-64 and aarch64): size_t + char[32].
inline constexpr size_t kMetadataBytes = 40;
inline constexpr size_t kTypeBytes = 32;
// Header of LibkinetoRequest before its pids.
inline constexpr size_t kRequestHeaderBytes = 16;
// Kineto sends the process and up to 10 ancestors; more is not a Kineto.
inline constexpr int32_t kMaxRequestPids = 64;
// LibkinetoRequest.type bits.
inline constexpr int32_t kRequestEvents = 1;
inline constexpr int32_t kRequestActivities = 2;

struct KinetoRequest {
  int32_t type = 0;  // 0: Kineto is busy (a trace is being collected), do not give it one
  int64_t job_id = 0;
  std::vector<int32_t> pids;  // the process, then its ancestors, as the process sees them
};

// A decoded datagram: a "req" poll (request set) or a "ctxt" registration (ignored: current
// Kineto does not send it, and a process is known from its first poll).
struct KinetoDatagram {
  std::string type;
  bool is_request = false;
  KinetoRequest request;
};

// Checks and decodes one datagram; the error says what was wrong (counted, never answered).
absl::StatusOr<KinetoDatagram> DecodeKinetoDatagram(std::string_view bytes);

// The bytes of a reply of `type` carrying `payload` (the config text for "req").
std::string EncodeKinetoMessage(std::string_view type, std::string_view payload);

// The bytes of a "req" poll as Kineto builds it (tests speak the protocol with this).
std::string EncodeKinetoRequest(const KinetoRequest& request);

}  // namespace profd::kineto
