#include "tests/metrics/wire_agent.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>

#include "profd/v1/agent_frame.h"

namespace profd::testing {

WireAgent::WireAgent(const std::string& agent_socket, v1::Hello hello, uint32_t device,
                     uint64_t memory_peak_bytes)
    : device_(device), memory_peak_bytes_(memory_peak_bytes) {
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, agent_socket.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd_);
    throw std::runtime_error("WireAgent: cannot connect to " + agent_socket);
  }
  v1::AgentMessage message;
  *message.mutable_hello() = std::move(hello);
  Send(message);
  thread_ = std::thread([this] { Run(); });
}

WireAgent::~WireAgent() {
  stop_.store(true);
  thread_.join();
  close(fd_);
}

void WireAgent::Send(const v1::AgentMessage& message) {
  std::string body = message.SerializeAsString();
  std::string frame(v1::kAgentFrameHeaderBytes, '\0');
  v1::EncodeFrameHeader(static_cast<uint32_t>(body.size()),
                        reinterpret_cast<unsigned char*>(frame.data()));
  frame += body;
  // profd's replies (HelloAck) are never read: they are a few bytes, far below the socket buffer.
  (void)!send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL);
}

void WireAgent::Run() {
  uint64_t launches = 0;
  while (!stop_.load()) {
    launches += 1000;
    v1::AgentMessage message;
    v1::Heartbeat* hb = message.mutable_heartbeat();
    v1::DeviceCounters* c = hb->add_devices();
    c->set_device(device_);
    c->set_kernel_launches(launches);
    c->set_graph_launches(launches / 100);
    c->set_memory_allocated_bytes(memory_peak_bytes_ / 2);
    c->set_memory_peak_bytes(memory_peak_bytes_);
    Send(message);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace profd::testing
