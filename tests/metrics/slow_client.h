// Test support for /metrics: raw TCP clients that misbehave the way an attacker on the network
// would (requests never finished, answers never read), kept up by a thread that renews them.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace profd::testing {

// A connected TCP socket to host:port ("127.0.0.1:9477"), or -1.
int ConnectTo(const std::string& address);

// Sends all of `data`; false on error.
bool SendAll(int fd, const std::string& data);

// Reads until the peer closes or `timeout_ms` passes; what came.
std::string ReadUntilClosed(int fd, int timeout_ms);

// True when the peer has closed the connection (a read returns 0 or an error) within timeout_ms.
bool ClosedByPeer(int fd, int timeout_ms);

// `unfinished` connections that send a request line and headers a byte at a time, never the blank
// line that ends them, and `non_readers` that send whole requests and never read the answer
// (with a tiny receive buffer). Every connection the server closes is opened again at once, so
// the pressure never lets up, until the destructor.
class SlowClients {
 public:
  SlowClients(std::string address, int unfinished, int non_readers);
  ~SlowClients();
  // Connections opened so far (initial and renewed).
  int opened() const { return opened_.load(); }

 private:
  void Run();
  int OpenUnfinished();
  int OpenNonReader();

  const std::string address_;
  const int unfinished_, non_readers_;
  std::atomic<bool> stop_{false};
  std::atomic<int> opened_{0};
  std::thread thread_;
};

}  // namespace profd::testing
