#include "tests/store/store_test_util.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/sha256.h"
#include "daemon/store/digest.h"
#include "daemon/store/sigv4.h"

namespace profd::testing {

namespace fs = std::filesystem;

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

namespace {

bool Accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

std::string SourceRoot();

std::string S3rverScript() {
  return SourceRoot() + "/tests/store/s3rver/node_modules/s3rver/bin/s3rver.js";
}

std::string SourceRoot() {
  // ctest's environment may lack PROFD_SOURCE_DIR: fall back to the source tree built from.
  const char* env = std::getenv("PROFD_SOURCE_DIR");
  return env && env[0] ? env : PROFD_TEST_SOURCE_DIR;
}

std::string ProxyScript() {
  return SourceRoot() + "/../shared/tools/s3-sigv4-proxy/verify-proxy.js";
}
std::string ProxyModules() { return SourceRoot() + "/tests/store/s3-sigv4-proxy/node_modules"; }

int CountVerdicts(const std::string& log, bool ok) {
  int n = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("\"verdict\":") == std::string::npos) continue;
    if ((line.find("\"verdict\":\"OK\"") != std::string::npos) == ok) ++n;
  }
  return n;
}

// Waits until port accepts connections, or throws with the log of a process that exited.
void WaitListening(int port, Subprocess& process, const std::string& what,
                   const std::string& err_log) {
  if (!WaitFor([&] { return Accepts(port) || !process.Running(); }, absl::Seconds(20)) ||
      !process.Running()) {
    throw std::runtime_error(what + " did not start:\n" + ReadFileOrEmpty(err_log));
  }
}

}  // namespace

const std::vector<std::string>& AbsentModes() {
  static const std::vector<std::string> modes = {"empty", "reject", "minio", "skip"};
  return modes;
}

SigV4ProxyProcess::SigV4ProxyProcess(const std::string& upstream, const std::string& absent_mode)
    : upstream_(upstream), absent_mode_(absent_mode), port_(FreeLoopbackPort()) {}

SigV4ProxyProcess::~SigV4ProxyProcess() { Stop(); }

bool SigV4ProxyProcess::Installed() {
  return fs::exists(ProxyScript()) && fs::exists(ProxyModules() + "/@smithy/signature-v4");
}

void SigV4ProxyProcess::Start() {
  process_ = std::make_unique<Subprocess>(
      std::vector<std::string>{"/usr/bin/env", "node", ProxyScript()},
      std::map<std::string, std::string>{{"NODE_PATH", ProxyModules()},
                                         {"LISTEN_PORT", std::to_string(port_)},
                                         {"UPSTREAM", upstream_},
                                         {"REGION", "us-east-1"},
                                         {"CREDS", R"({"S3RVER":{"secret":"S3RVER"}})"},
                                         {"LOG", dir_.File("requests.jsonl")},
                                         {"ABSENT", absent_mode_}},
      dir_.File("proxy.log"));
  WaitListening(port_, *process_, "s3-sigv4-proxy", dir_.File("proxy.log.err"));
}

void SigV4ProxyProcess::Stop() {
  if (!process_) return;
  process_->Signal(SIGTERM);
  process_->Wait(absl::Seconds(10));
  process_.reset();
  WaitFor([&] { return !Accepts(port_); }, absl::Seconds(5));
}

std::string SigV4ProxyProcess::log() const { return ReadFileOrEmpty(dir_.File("requests.jsonl")); }

int SigV4ProxyProcess::Accepted() const { return CountVerdicts(log(), true); }

int SigV4ProxyProcess::Refused() const { return CountVerdicts(log(), false); }

S3rverProcess::S3rverProcess(std::vector<std::string> buckets)
    : buckets_(std::move(buckets)), port_(FreeLoopbackPort()) {}

S3rverProcess::~S3rverProcess() { Stop(); }

bool S3rverProcess::Installed() { return fs::exists(S3rverScript()); }

void S3rverProcess::Start() {
  std::vector<std::string> argv = {"/usr/bin/env", "node",       S3rverScript(),
                                   "-d",           data_.path(), "-a",
                                   "127.0.0.1",    "-p",         std::to_string(port_)};
  for (const std::string& b : buckets_) {
    argv.push_back("--configure-bucket");
    argv.push_back(b);
  }
  // s3rver 3.7.1 makes continuation tokens with a cipher Node 20's OpenSSL 3 keeps in its legacy
  // provider: without it every listing that pages answers 500.
  process_ = std::make_unique<Subprocess>(
      argv, std::map<std::string, std::string>{{"NODE_OPTIONS", "--openssl-legacy-provider"}},
      data_.File("s3rver.log"));
  WaitListening(port_, *process_, "s3rver", data_.File("s3rver.log.err"));
}

void S3rverProcess::Stop() {
  if (!process_) return;
  process_->Signal(SIGTERM);
  process_->Wait(absl::Seconds(10));
  process_.reset();
  WaitFor([&] { return !Accepts(port_); }, absl::Seconds(5));
}

std::string S3rverProcess::log() const {
  return ReadFileOrEmpty(data_.File("s3rver.log")) + ReadFileOrEmpty(data_.File("s3rver.log.err"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Sha256File(const std::string& path) {
  auto sha = profd::Sha256OfFile(path);
  return sha.ok() ? *sha : "";
}

std::string MakeTraceFile(const std::string& path, int kernels, uint64_t padding, bool gzip) {
  std::string json = R"({"schemaVersion": 1, "traceName": "test", "traceEvents": [)";
  absl::StrAppend(&json, R"({"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel",)",
                  R"("pid":777,"tid":1,"ts":0.0,"dur":2.0})");
  for (int i = 0; i < kernels; ++i) {
    absl::StrAppend(&json, R"(,{"ph":"X","cat":"kernel","name":"kernel_)", i % 3,
                    R"(","pid":0,"tid":7,"ts":)", 10 + i * 10, R"(,"dur":)", 1 + i % 3,
                    R"(,"args":{"device":0,"stream":7}})");
  }
  json += R"(], "padding": ")";
  // Incompressible padding: random base64 letters, so gzip keeps it about this size.
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::mt19937_64 random(padding + kernels);
  for (uint64_t i = 0; i < padding; ++i) json.push_back(kAlphabet[random() % 64]);
  json += "\"}\n";
  if (gzip) {
    gzFile out = gzopen(path.c_str(), "wb6");
    gzwrite(out, json.data(), static_cast<unsigned>(json.size()));
    gzclose(out);
  } else {
    std::ofstream(path, std::ios::binary) << json;
  }
  return path;
}

std::string MakeCaptureFolder(const std::string& parent, const std::string& id,
                              const std::string& hostname, const std::string& pod, uint64_t padding,
                              absl::Time started) {
  std::string folder = parent + "/" + id;
  fs::create_directories(folder);
  std::string trace = MakeTraceFile(folder + "/trace-777.json.gz", 5, padding, true);
  std::ofstream(folder + "/summary.json")
      << R"({"window_ns": "50000", "events": "6", "gpus": [{"device": 0, "kernels": "5"}]})";
  std::string files;
  for (const std::string& name : {std::string("trace-777.json.gz"), std::string("summary.json")}) {
    if (!files.empty()) files += ",";
    absl::StrAppend(&files, R"({"name":")", name, R"(","bytes":)",
                    fs::file_size(folder + "/" + name), R"(,"sha256":")",
                    Sha256File(folder + "/" + name), "\"}");
  }
  std::ofstream(folder + "/manifest.json")
      << absl::StrCat(R"({"capture_id":")", id, R"(","hostname":")", hostname,
                      R"(","label":"test capture","started_unix_ns":)", absl::ToUnixNanos(started),
                      R"(,"processes":[{"pid":777,"comm":"python3","pod_name":")", pod,
                      R"(","pod_namespace":"serving"}],"files":[)", files, "]}");
  return folder;
}

long SignedPut(const std::string& endpoint, const std::string& bucket, const std::string& raw_key,
               const std::string& body) {
  const std::string host = endpoint.substr(endpoint.find("://") + 3);
  const std::string path = absl::StrCat("/", bucket, "/", raw_key);
  const store::PayloadDigest digest = store::DigestPayload(body);
  const std::string date = store::AmzDate(absl::Now());
  store::SigV4Request request{"PUT", path, "", {}, digest.sha256_hex};
  request.headers = {{"host", host},
                     {"x-amz-content-sha256", digest.sha256_hex},
                     {"x-amz-date", date},
                     {"content-md5", digest.md5_base64()},
                     {"content-type", "application/octet-stream"}};
  const store::SigV4Signature signature =
      store::SignV4(request, "S3RVER", "S3RVER", "us-east-1", date);
  CURL* curl = curl_easy_init();
  curl_slist* headers = nullptr;
  for (const auto& [name, value] : request.headers) {
    headers = curl_slist_append(headers, absl::StrCat(name, ": ", value).c_str());
  }
  headers = curl_slist_append(headers, ("Authorization: " + signature.authorization).c_str());
  headers = curl_slist_append(headers, "Expect:");
  const std::string url = endpoint + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "PUT");
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 20L);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char*, size_t size, size_t n, void*) { return size * n; });
  long status = 0;
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return status;
}

std::string StateOf(const ProfdProcess& profd, const std::string& id) {
  rapidjson::Document doc = profd.ProfctlJson({"list"});
  for (const auto& t : doc["traces"].GetArray()) {
    if (id == t["capture_id"].GetString()) return t["state"].GetString();
  }
  return "absent";
}

bool Stored(const ProfdProcess& profd, const std::string& id) {
  return StateOf(profd, id) == "TRACE_STATE_STORED";
}

}  // namespace profd::testing
