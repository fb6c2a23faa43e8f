// Test support for the store tests: a real s3rver (S3-protocol server, npm) on a free loopback
// port, the SigV4-verifying proxy of ../shared/tools/s3-sigv4-proxy in front of it, and capture
// folders shaped as docs/TRACE_FORMAT.md describes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "tests/support/profd_process.h"
#include "tests/support/subprocess.h"

namespace profd::testing {

// s3rver in a child process. It checks that the access key id is one it knows (S3RVER) and
// accepts any SigV4 signature from it; buckets are created at start (--configure-bucket).
class S3rverProcess {
 public:
  explicit S3rverProcess(std::vector<std::string> buckets);
  ~S3rverProcess();

  // node_modules installed by scripts/setup.sh.
  static bool Installed();
  // Starts on port() (the same port again after Stop) and waits until it accepts connections.
  void Start();
  void Stop();
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Where s3rver keeps an object's bytes on disk (to check what arrived).
  std::string data_dir() const { return data_.path(); }
  // Its request log (one line per request: method, path and query).
  std::string log() const;

 private:
  std::vector<std::string> buckets_;
  TempDir data_;
  int port_;
  std::unique_ptr<Subprocess> process_;
};

// ../shared/tools/s3-sigv4-proxy in a child process, in front of an s3rver: every request must
// carry a SigV4 signature that AWS's own JS signer (@smithy/signature-v4) recomputes equal, and
// the payload hashes must match, before it is forwarded. Credentials: access key S3RVER, secret
// S3RVER. absent_mode is what a signed header missing from the request counts as (its README):
// "empty", "reject" (AWS), "minio" or "skip" (Ceph RGW).
class SigV4ProxyProcess {
 public:
  SigV4ProxyProcess(const std::string& upstream, const std::string& absent_mode);
  ~SigV4ProxyProcess();

  // node_modules installed by scripts/setup.sh, and ../shared beside the checkout.
  static bool Installed();
  // Starts on a free port (the same one again after Stop) and waits until it accepts connections.
  void Start();
  void Stop();
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // One JSON line per request: its verdict ("OK" or the S3 error code), signedHeaders, rawUrl...
  std::string log() const;
  // Requests it let through, and requests it refused.
  int Accepted() const;
  int Refused() const;

 private:
  std::string upstream_, absent_mode_;
  TempDir dir_;
  int port_;
  std::unique_ptr<Subprocess> process_;
};

// The ABSENT modes of the proxy: every rule S3 implementations apply to a signed, absent header.
const std::vector<std::string>& AbsentModes();

// A port on 127.0.0.1 nothing listens on now.
int FreeLoopbackPort();

// Writes a capture folder <parent>/<id>/ with manifest.json (files with sizes and sha256),
// trace-<pid>.json.gz (a small Kineto-style trace, padded with `padding` incompressible bytes in a
// metadata string) and summary.json. Returns the folder.
std::string MakeCaptureFolder(const std::string& parent, const std::string& id,
                              const std::string& hostname, const std::string& pod,
                              uint64_t padding = 0, absl::Time started = absl::Now());

// A gzip Chrome-trace JSON file with `kernels` kernel events and about `padding` bytes of
// incompressible text; returns the path.
std::string MakeTraceFile(const std::string& path, int kernels, uint64_t padding, bool gzip);

std::string Sha256File(const std::string& path);

// PUTs body under `raw_key` of `bucket` at endpoint (path style), signed with SigV4 for the
// access key and secret S3RVER, the key sent exactly as given (no path normalization, no check):
// what anyone holding a node's credentials can write into a shared bucket. Returns the HTTP
// status (0 when no answer came).
long SignedPut(const std::string& endpoint, const std::string& bucket, const std::string& raw_key,
               const std::string& body);

// A capture's state in `profctl list` ("TRACE_STATE_STORED", ...), or "absent".
std::string StateOf(const ProfdProcess& profd, const std::string& id);
bool Stored(const ProfdProcess& profd, const std::string& id);
std::string ReadFile(const std::string& path);

}  // namespace profd::testing
