// profd's own accept loop for --grpc_address, in front of gRPC. gRPC 1.51 (Debian) accepts every
// TCP connection and keeps one that never starts TLS until its handshake timeout, with no cap on
// how many: anyone who can reach the port could hold all of profd's descriptors with idle
// connections (ServerBuilder has no cap on connections, only GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS
// and limits on streams and memory). So profd accepts, and holds each new connection until the
// client has sent its first TLS record (its ClientHello; a plaintext client's first bytes) and
// only then hands it to gRPC (ExternalConnectionAcceptor), which does the TLS handshake under
// GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS. A held connection is closed at the handshake deadline;
// at most max_pending are held, and a new one past that closes the oldest, so idle connections
// can neither pile up nor keep a real client out. The unix socket and the agents are not
// concerned: they are not reachable from the network and have their own limits.
//
// One thread (Start) owns the listening sockets and the connections it holds; counters() from
// any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/log.h"
#include "grpcpp/server_builder.h"

namespace profd {

struct TcpListenerOptions {
  std::string address;  // --grpc_address: host:port, [v6]:port, :port for every address
  // A client that has not sent its first TLS record by then is closed; gRPC gives the handshake
  // that follows as long again (a TLS client sends its ClientHello at once).
  absl::Duration handshake_timeout = absl::Seconds(5);
  // Connections held before their first TLS record: a new one past this closes the oldest.
  // Lowered to RLIMIT_NOFILE/8 (agents take up to half of profd's descriptors).
  size_t max_pending = 64;
};

class TcpListener {
 public:
  // Binds and listens on every address the host part names; the port is known from here on.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Listen(TcpListenerOptions options);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  int port() const { return port_; }
  size_t max_pending() const { return max_pending_; }
  // Starts the accept thread. acceptor is gRPC's (ServerBuilder::experimental()
  // .AddExternalConnectionAcceptor), used once the server has started.
  void Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor);
  // Stops accepting and closes the connections still held. Before the gRPC server's Shutdown.
  void Stop();

  struct Counters {
    uint64_t accepted = 0;
    uint64_t handed_to_grpc = 0;
    uint64_t timed_out = 0;  // no TLS record by the deadline
    uint64_t evicted = 0;    // the oldest held one, when max_pending were held
    uint64_t gone = 0;       // closed by the client before sending anything
    size_t held = 0;
  };
  Counters counters() const;

 private:
  TcpListener(TcpListenerOptions options, std::vector<int> listen_fds, int port);
  void Run();
  // False when out of descriptors with no held connection left to close for one.
  bool Accept(int listen_fd, absl::Time now);
  void OnReadable(int fd);
  void Close(int fd, std::atomic<uint64_t>* reason);
  void Hand(int fd);

  const TcpListenerOptions options_;
  const std::vector<int> listen_fds_;
  const int port_;
  size_t max_pending_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  // Run's thread only: held connections by descriptor, and in the order they came.
  struct Held {
    uint64_t order = 0;
    absl::Time deadline;
  };
  std::map<int, Held> held_;
  std::map<uint64_t, int> by_age_;
  uint64_t next_order_ = 0;
  // One budget per reason, so that a flood of one kind does not hide the other.
  LogBudget evicted_log_{"grpc-tcp", "TCP connections closed for room", Severity::kWarning, 5};
  LogBudget timed_out_log_{"grpc-tcp", "TCP connections closed at the handshake deadline",
                           Severity::kWarning, 5};

  std::atomic<uint64_t> accepted_{0}, handed_{0}, timed_out_{0}, evicted_{0}, gone_{0};
  std::atomic<size_t> held_count_{0};
};

}  // namespace profd
