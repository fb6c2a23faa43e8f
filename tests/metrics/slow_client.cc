#include "tests/metrics/slow_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace profd::testing {

int ConnectTo(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  std::string host = address.substr(0, colon);
  if (host == "0.0.0.0" || host == "localhost") host = "127.0.0.1";
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::string ReadUntilClosed(int fd, int timeout_ms) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buffer[65536];
  while (true) {
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now())
                                          .count());
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) break;
    ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

bool ClosedByPeer(int fd, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buffer[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) > 0) {
      ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n <= 0) return true;
    }
  }
  return false;
}

SlowClients::SlowClients(std::string address, int unfinished, int non_readers)
    : address_(std::move(address)), unfinished_(unfinished), non_readers_(non_readers) {
  thread_ = std::thread([this] { Run(); });
}

SlowClients::~SlowClients() {
  stop_.store(true);
  thread_.join();
}

int SlowClients::OpenUnfinished() {
  int fd = ConnectTo(address_);
  if (fd >= 0) ++opened_;
  return fd;
}

int SlowClients::OpenNonReader() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // A tiny receive window: the answer stays stuck in the server's send path.
  int small = 1024;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  close(fd);
  fd = ConnectTo(address_);
  if (fd < 0) return -1;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  ++opened_;
  // Many requests back to back, never reading an answer.
  std::string requests;
  for (int i = 0; i < 50; ++i) requests += "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  send(fd, requests.data(), requests.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  return fd;
}

void SlowClients::Run() {
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: slow\r\nUser-Agent: slowloris\r\n";
  struct Slow {
    int fd;
    size_t next;  // next byte of `request` to send
  };
  std::vector<Slow> slow;
  std::vector<int> stuck;
  for (int i = 0; i < unfinished_; ++i) slow.push_back({OpenUnfinished(), 0});
  for (int i = 0; i < non_readers_; ++i) stuck.push_back(OpenNonReader());
  while (!stop_.load()) {
    // One more byte on every unfinished request; a connection the server closed is reopened.
    for (Slow& s : slow) {
      char probe;
      bool gone = s.fd < 0 || recv(s.fd, &probe, 1, MSG_DONTWAIT) == 0;
      if (!gone && s.next < request.size()) {
        gone = send(s.fd, &request[s.next], 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
        ++s.next;
      }
      if (gone) {
        if (s.fd >= 0) close(s.fd);
        s = {OpenUnfinished(), 0};
      }
    }
    for (int& fd : stuck) {
      char probe;
      ssize_t n = fd < 0 ? 0 : recv(fd, &probe, 1, MSG_DONTWAIT | MSG_PEEK);
      if (n == 0) {
        if (fd >= 0) close(fd);
        fd = OpenNonReader();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (Slow& s : slow) {
    if (s.fd >= 0) close(s.fd);
  }
  for (int fd : stuck) {
    if (fd >= 0) close(fd);
  }
}

}  // namespace profd::testing
