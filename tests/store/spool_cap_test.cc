// The spool's cap counts the bytes that arrive, not the size a client declares: a raw gRPC
// ImportTrace (the generated stub, as any client could write) against a real profd with a small
// --spool_max_bytes. It used to write 200 MiB into a spool capped at 50 MiB when the header said 0.
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "profd/v1/store.grpc.pb.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uint64_t kCap = 8u << 20;

uint64_t BytesUnder(const std::string& folder) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(folder, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st;
    // lstat: files may vanish while we walk.
    if (lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += st.st_size;
  }
  return total;
}

struct Sent {
  grpc::Status status;
  uint64_t accepted = 0;  // bytes handed to gRPC before it refused more
};

// Streams a valid trace JSON of `bytes` (a padding string does the bulk), announcing `declared`.
Sent Import(v1::TraceStore::Stub& stub, uint64_t declared, uint64_t bytes) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::ImportTraceResponse response;
  auto writer = stub.ImportTrace(&ctx, &response);
  v1::ImportTraceChunk chunk;
  chunk.mutable_header()->set_file_name("attack.json");
  chunk.mutable_header()->set_bytes(declared);
  Sent sent;
  if (writer->Write(chunk)) {
    const std::string head = R"({"traceEvents":[],"padding":")";
    const std::string tail = R"("})";
    uint64_t left = bytes - head.size() - tail.size();
    chunk.set_data(head);
    bool ok = writer->Write(chunk);
    while (ok && left > 0) {
      const uint64_t n = std::min<uint64_t>(left, 1 << 20);
      chunk.set_data(std::string(n, 'a'));
      ok = writer->Write(chunk);
      if (ok) {
        sent.accepted += n;
        left -= n;
      }
    }
    if (ok) {
      chunk.set_data(tail);
      writer->Write(chunk);
    }
  }
  writer->WritesDone();
  sent.status = writer->Finish();
  return sent;
}

class SpoolCapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    profd_ = std::make_unique<ProfdProcess>(
        std::vector<std::string>{"--spool_dir=" + spool_.path(), "--store=file://" + store_.path(),
                                 absl::StrCat("--spool_max_bytes=", kCap)});
    profd_->Start();
    stub_ = v1::TraceStore::NewStub(
        grpc::CreateChannel(profd_->target(), grpc::InsecureChannelCredentials()));
  }

  TempDir spool_, store_;
  std::unique_ptr<ProfdProcess> profd_;
  std::unique_ptr<v1::TraceStore::Stub> stub_;
};

TEST_F(SpoolCapTest, ImportDeclaringSizeZeroIsStoppedAtTheCapAndLeavesNothing) {
  // Watch the spool on disk while the import streams: it must never hold more than the cap.
  std::atomic<bool> done{false};
  std::atomic<uint64_t> most{0};
  std::thread watcher([&] {
    while (!done.load()) {
      most.store(std::max(most.load(), BytesUnder(spool_.path())));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  Sent sent = Import(*stub_, /*declared=*/0, /*bytes=*/64u << 20);
  done.store(true);
  watcher.join();

  EXPECT_EQ(sent.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << sent.status.error_message();
  EXPECT_THAT(sent.status.error_message(), HasSubstr("stopped after"));
  EXPECT_THAT(sent.status.error_message(), HasSubstr("the client declared 0 B"));
  EXPECT_THAT(sent.status.error_message(), HasSubstr("spool full"));
  EXPECT_THAT(sent.status.error_message(), HasSubstr("--spool_max_bytes"));
  EXPECT_LE(most.load(), kCap) << "the spool held more than --spool_max_bytes on disk";
  EXPECT_LT(sent.accepted, 32u << 20) << "profd kept reading past the cap";

  // Nothing left behind: no file in the spool or the store, no reservation, nothing listed.
  EXPECT_EQ(BytesUnder(spool_.path()), 0u);
  EXPECT_EQ(BytesUnder(store_.path()), 0u);
  rapidjson::Document spool = profd_->ProfctlJson({"spool"});
  EXPECT_EQ(std::stoull(spool["bytes"].GetString()), 0u);
  EXPECT_EQ(spool["reserved"].GetInt(), 0);
  EXPECT_GE(std::stoull(spool["refused_total"].GetString()), 1u);
  EXPECT_EQ(profd_->ProfctlJson({"list"})["traces"].Size(), 0u);
}

TEST_F(SpoolCapTest, ALyingSizeIsNoExcuseAndHonestImportsStillFit) {
  // Declares 1 KiB, sends 16 MiB.
  Sent lying = Import(*stub_, 1024, 16u << 20);
  EXPECT_EQ(lying.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << lying.status.error_message();
  EXPECT_EQ(BytesUnder(spool_.path()), 0u);

  // A size too large for the cap is refused before a byte is written.
  Sent too_big = Import(*stub_, kCap, 1024);
  EXPECT_EQ(too_big.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(too_big.status.error_message(), HasSubstr("spool full"));

  // Imports that fit go through, whether they declare their size (gzip copy included) or not.
  Sent unknown_size = Import(*stub_, 0, 3u << 20);
  EXPECT_TRUE(unknown_size.status.ok()) << unknown_size.status.error_message();
  Sent declared = Import(*stub_, 1u << 20, 1u << 20);
  EXPECT_TRUE(declared.status.ok()) << declared.status.error_message();
  EXPECT_TRUE(WaitFor([&] { return profd_->ProfctlJson({"list"})["traces"].Size() == 2; },
                      absl::Seconds(10)));
}

}  // namespace
}  // namespace profd::testing
