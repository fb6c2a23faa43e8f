#include "daemon/store/trace_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/capture_id.h"
#include "common/file_name.h"
#include "common/mutex.h"
#include "common/proto_json.h"
#include "common/sha256.h"
#include "daemon/log.h"
#include "daemon/store/local_bucket.h"
#include "google/protobuf/util/json_util.h"
#include "rapidjson/document.h"

namespace profd::store {

namespace fs = std::filesystem;

namespace {

constexpr char kIndexFolder[] = "_index/";

bool PodMatches(const v1::StoredTrace& t, const std::string& pod) {
  for (const std::string& p : t.pods()) {
    if (p == pod) return true;
    size_t slash = p.find('/');
    if (slash != std::string::npos && p.substr(slash + 1) == pod) return true;
  }
  return false;
}

}  // namespace

bool TraceMatches(const v1::StoredTrace& row, const TraceFilter& filter) {
  if (!filter.hostname.empty() && row.hostname() != filter.hostname) return false;
  if (!filter.pod.empty() && !PodMatches(row, filter.pod)) return false;
  if (!filter.alert.empty() && row.alert() != filter.alert) return false;
  if (!filter.fleet_id.empty() && row.fleet_id() != filter.fleet_id) return false;
  return absl::FromUnixNanos(row.started_unix_ns()) >= filter.since;
}

namespace {

bool Newer(const v1::StoredTrace& a, const v1::StoredTrace& b) {
  if (a.started_unix_ns() != b.started_unix_ns()) return a.started_unix_ns() > b.started_unix_ns();
  return a.capture_id() > b.capture_id();
}

// The last path element of a "a/b/c/" folder key.
std::string LastElement(const std::string& folder) {
  std::string f(absl::StripSuffix(folder, "/"));
  size_t slash = f.rfind('/');
  return slash == std::string::npos ? f : f.substr(slash + 1);
}

}  // namespace

absl::Status ValidateCaptureId(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 200 && id[0] != '.';
  for (char c : id) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') ok = false;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", id, "' is not a capture id: expected letters, digits, '.', '_' or '-' (such as ",
        "20261129T164836Z-node-1-9f3a2c01); `profctl list` shows the ids"));
  }
  return absl::OkStatus();
}

absl::Status ValidateStoredTrace(const v1::StoredTrace& row, const std::string& where) {
  auto refuse = [&](const std::string& what, const absl::Status& why) {
    return absl::DataLossError(absl::StrCat(
        "capture ", EscapedName(row.capture_id()), " in ", where, " is refused: its ", what, " ",
        why.message(),
        ". profd never writes such a row: someone wrote it by hand or tampered with the store. "
        "Nothing of it is read; remove the row from that index"));
  };
  if (absl::Status s = ValidateCaptureId(row.capture_id()); !s.ok()) return refuse("id", s);
  if (absl::Status s = ValidatePlainFileName(row.hostname()); !s.ok()) {
    return refuse("host name", s);
  }
  for (const v1::StoredFile& f : row.files()) {
    if (absl::Status s = ValidatePlainFileName(f.name()); !s.ok()) return refuse("file name", s);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::StoredTrace> DescribeCaptureFolder(const std::string& folder,
                                                      const std::string& default_hostname) {
  std::string manifest_path = absl::StrCat(folder, "/", kManifestFile);
  std::ifstream in(manifest_path);
  if (!in) {
    return absl::FailedPreconditionError(absl::StrCat(
        "capture folder ", folder, " has no manifest.json: a finished capture must have one"));
  }
  std::stringstream text;
  text << in.rdbuf();
  rapidjson::Document manifest;
  manifest.Parse(text.str().c_str());
  if (manifest.HasParseError() || !manifest.IsObject()) {
    return absl::FailedPreconditionError(
        absl::StrCat(manifest_path, " is not a JSON object (docs/TRACE_FORMAT.md)"));
  }
  auto str = [&](const char* name) -> std::string {
    auto it = manifest.FindMember(name);
    return it != manifest.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
  };
  // Proto3 JSON (the capture manifest is a CaptureInfo) writes 64-bit integers as strings.
  auto i64 = [&](const char* name) -> int64_t {
    auto it = manifest.FindMember(name);
    if (it == manifest.MemberEnd()) return 0;
    if (it->value.IsInt64()) return it->value.GetInt64();
    int64_t v = 0;
    if (it->value.IsString() && absl::SimpleAtoi(it->value.GetString(), &v)) return v;
    return 0;
  };

  v1::StoredTrace trace;
  trace.set_capture_id(str("capture_id"));
  if (trace.capture_id().empty()) trace.set_capture_id(fs::path(folder).filename().string());
  if (absl::Status s = ValidateCaptureId(trace.capture_id()); !s.ok()) return s;
  trace.set_hostname(str("hostname").empty() ? default_hostname : str("hostname"));
  if (absl::Status s = ValidatePlainFileName(trace.hostname()); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(manifest_path, ": the host name ", s.message()));
  }
  trace.set_label(str("label"));
  if (auto alert = manifest.FindMember("alert");
      alert != manifest.MemberEnd() && alert->value.IsObject()) {
    auto name = alert->value.FindMember("name");
    if (name != alert->value.MemberEnd() && name->value.IsString()) {
      trace.set_alert(name->value.GetString());
    }
  }
  trace.set_fleet_id(str("fleet_id"));
  trace.set_source(str("source").empty() ? "capture" : str("source"));
  int64_t started = i64("started_unix_ns");
  if (started == 0) started = i64("requested_unix_ns");
  absl::Time from_id;
  if (started == 0 && TimeOfId(trace.capture_id(), &from_id)) started = absl::ToUnixNanos(from_id);
  if (started == 0) {
    struct stat st;
    if (stat(manifest_path.c_str(), &st) == 0) started = int64_t{st.st_mtime} * 1000000000;
  }
  trace.set_started_unix_ns(started);
  if (auto it = manifest.FindMember("processes");
      it != manifest.MemberEnd() && it->value.IsArray()) {
    for (const auto& p : it->value.GetArray()) {
      if (!p.IsObject()) continue;
      auto pod = p.FindMember("pod_name");
      if (pod == p.MemberEnd() || !pod->value.IsString() || pod->value.GetStringLength() == 0) {
        continue;
      }
      auto ns = p.FindMember("pod_namespace");
      std::string name = pod->value.GetString();
      if (ns != p.MemberEnd() && ns->value.IsString() && ns->value.GetStringLength() > 0) {
        name = absl::StrCat(ns->value.GetString(), "/", name);
      }
      if (std::find(trace.pods().begin(), trace.pods().end(), name) == trace.pods().end()) {
        trace.add_pods(name);
      }
    }
  }

  if (absl::Status s = AddFolderFiles(folder, &trace); !s.ok()) return s;
  return trace;
}

v1::StoredTrace DescribeCapture(const v1::CaptureInfo& info) {
  v1::StoredTrace trace;
  trace.set_capture_id(info.capture_id());
  trace.set_hostname(info.hostname());
  trace.set_label(info.label());
  trace.set_alert(info.alert().name());
  trace.set_fleet_id(info.fleet_id());
  trace.set_source("capture");
  trace.set_started_unix_ns(info.started_unix_ns() != 0 ? info.started_unix_ns()
                                                        : info.requested_unix_ns());
  for (const v1::ProcessCapture& p : info.processes()) {
    if (p.pod_name().empty()) continue;
    if (std::find(trace.pods().begin(), trace.pods().end(), p.pod_name()) == trace.pods().end()) {
      trace.add_pods(p.pod_name());
    }
  }
  for (const v1::TraceFile& file : info.files()) {
    v1::StoredFile* f = trace.add_files();
    f->set_name(file.name());
    f->set_bytes(file.bytes());
    f->set_sha256(file.sha256());
  }
  return trace;
}

absl::Status AddFolderFiles(const std::string& folder, v1::StoredTrace* trace) {
  std::map<std::string, v1::StoredFile> known;
  for (const v1::StoredFile& f : trace->files()) {
    if (!f.sha256().empty()) known[f.name()] = f;
  }
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && !absl::StartsWith(name, ".")) names.push_back(name);
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", folder, ": ", ec.message()));
  std::sort(names.begin(), names.end());
  trace->clear_files();
  uint64_t total = 0;
  for (const std::string& name : names) {
    v1::StoredFile* f = trace->add_files();
    if (auto it = known.find(name); it != known.end()) {
      *f = it->second;
    } else {
      std::string path = absl::StrCat(folder, "/", name);
      absl::StatusOr<std::string> sha = Sha256OfFile(path);
      if (!sha.ok()) return sha.status();
      f->set_name(name);
      f->set_bytes(fs::file_size(path, ec));
      f->set_sha256(*sha);
    }
    total += f->bytes();
  }
  trace->set_bytes(total);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TraceStore>> TraceStore::Open(const std::string& uri,
                                                             const S3Options& s3) {
  if (absl::StartsWith(uri, "file://") || absl::StartsWith(uri, "/")) {
    std::string root(absl::StripPrefix(uri, "file://"));
    if (root.empty() || root[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--store=", uri,
                       ": a local store needs an absolute path, as file:///var/lib/profd/traces"));
    }
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    auto store =
        std::make_unique<TraceStore>(std::make_unique<LocalBucket>(root), "file://" + root, "");
    store->is_local_ = true;
    store->local_root_ = root;
    return store;
  }
  if (absl::StartsWith(uri, "s3://")) {
    std::string rest(absl::StripPrefix(uri, "s3://"));
    size_t slash = rest.find('/');
    std::string bucket = rest.substr(0, slash);
    std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    if (bucket.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--store=", uri, ": no bucket; expected s3://bucket or s3://bucket/prefix"));
    }
    S3Options options = s3;
    options.bucket = bucket;
    if (options.part_size < (5u << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--s3_part_size=", options.part_size, ": S3 parts must be at least 5 MiB (5242880)"));
    }
    std::string canonical = absl::StrCat("s3://", bucket, prefix.empty() ? "" : "/", prefix);
    return std::make_unique<TraceStore>(std::make_unique<S3Bucket>(options), canonical,
                                        prefix.empty() ? "" : prefix + "/");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--store=", uri, ": expected file:///path/to/folder or s3://bucket[/prefix]"));
}

TraceStore::TraceStore(std::unique_ptr<ObjectBucket> bucket, std::string uri,
                       std::string key_prefix)
    : bucket_(std::move(bucket)), uri_(std::move(uri)), prefix_(std::move(key_prefix)) {}

absl::Time TraceStore::DayOf(const v1::StoredTrace& trace) {
  absl::Time t;
  if (!TimeOfId(trace.capture_id(), &t)) {
    t = trace.started_unix_ns() != 0 ? absl::FromUnixNanos(trace.started_unix_ns()) : absl::Now();
  }
  return t;
}

std::string TraceStore::DayPrefix(const v1::StoredTrace& trace) const {
  return prefix_ + absl::FormatTime("%Y/%m/%d/", DayOf(trace), absl::UTCTimeZone());
}

std::string TraceStore::IndexDay(const v1::StoredTrace& trace) const {
  return absl::FormatTime("%Y-%m-%d", DayOf(trace), absl::UTCTimeZone());
}

std::string TraceStore::IndexKey(const std::string& day, const std::string& host) const {
  return absl::StrCat(prefix_, kIndexFolder, day, "/", host, ".json");
}

std::string TraceStore::FolderKey(const v1::StoredTrace& trace) const {
  return absl::StrCat(DayPrefix(trace), trace.hostname(), "/", trace.capture_id(), "/");
}

std::string TraceStore::LocationOf(const v1::StoredTrace& trace) const {
  return bucket_->UriOf(FolderKey(trace));
}

absl::StatusOr<std::vector<v1::StoredTrace>> TraceStore::ReadIndex(
    const std::string& key, absl::Time deadline,
    std::vector<std::pair<std::string, absl::Status>>* refused) {
  absl::StatusOr<std::string> text = ReadAll(*bucket_, key, deadline);
  if (absl::IsNotFound(text.status())) return std::vector<v1::StoredTrace>{};
  if (!text.ok()) return text.status();
  v1::ListTracesResponse index;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(*text, &index, options).ok()) {
    return absl::DataLossError(absl::StrCat("the store index ", bucket_->UriOf(key),
                                            " is not valid JSON; delete it to rebuild"));
  }
  std::vector<v1::StoredTrace> rows;
  for (const v1::StoredTrace& row : index.traces()) {
    absl::Status valid =
        ValidateStoredTrace(row, absl::StrCat("the store index ", bucket_->UriOf(key)));
    if (valid.ok()) {
      rows.push_back(row);
    } else if (refused != nullptr) {
      refused->emplace_back(row.capture_id(), valid);
    } else if (MutexLock lock(&warned_mu_);
               warned_.size() < 1024 && warned_.insert(key + "\n" + row.capture_id()).second) {
      // Once per row: `profctl list` reads the same index again and again.
      LogWarning("store", "%s", valid.message());
    }
  }
  return rows;
}

absl::StatusOr<std::vector<v1::StoredTrace>> TraceStore::ReadIndexes(
    const std::vector<std::string>& keys, absl::Time deadline) {
  constexpr size_t kConcurrentReads = 16;
  std::vector<absl::StatusOr<std::vector<v1::StoredTrace>>> read(keys.size());
  std::atomic<size_t> next{0};
  auto reader = [&] {
    for (size_t i; (i = next.fetch_add(1)) < keys.size();) read[i] = ReadIndex(keys[i], deadline);
  };
  std::vector<std::thread> readers;
  for (size_t n = 1; n < std::min(kConcurrentReads, keys.size()); ++n) readers.emplace_back(reader);
  reader();
  for (std::thread& t : readers) t.join();
  std::vector<v1::StoredTrace> rows;
  for (auto& r : read) {
    if (!r.ok()) return r.status();
    for (v1::StoredTrace& row : *r) rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<v1::StoredTrace> TraceStore::Put(const v1::StoredTrace& described,
                                                const std::string& folder, bool may_move) {
  if (absl::Status s = ValidateStoredTrace(described, folder); !s.ok()) return s;
  const std::string key = FolderKey(described);
  bool has_manifest = false;
  for (const v1::StoredFile& f : described.files()) {
    if (f.name() == kManifestFile) {
      has_manifest = true;
      continue;
    }
    absl::Status s =
        bucket_->PutFile(key + f.name(), absl::StrCat(folder, "/", f.name()), may_move);
    if (!s.ok()) return s;
  }
  if (!has_manifest) {
    return absl::FailedPreconditionError(
        absl::StrCat("capture ", described.capture_id(), " has no manifest.json"));
  }
  absl::Status s =
      bucket_->PutFile(key + kManifestFile, absl::StrCat(folder, "/", kManifestFile), may_move);
  if (!s.ok()) return s;

  v1::StoredTrace stored = described;
  stored.set_state(v1::TRACE_STATE_STORED);
  stored.set_location(bucket_->UriOf(key));
  stored.clear_upload_error();

  MutexLock lock(&index_mu_);
  const std::string index_key = IndexKey(IndexDay(described), described.hostname());
  // Rows that fail ValidateStoredTrace are dropped from our own index as it is rewritten.
  absl::StatusOr<std::vector<v1::StoredTrace>> rows = ReadIndex(index_key, absl::InfiniteFuture());
  if (!rows.ok() && !absl::IsDataLoss(rows.status())) return rows.status();
  v1::ListTracesResponse index;
  if (rows.ok()) {
    for (const v1::StoredTrace& row : *rows) {
      if (row.capture_id() != stored.capture_id()) *index.add_traces() = row;
    }
  }
  *index.add_traces() = stored;
  s = bucket_->PutBytes(index_key, ProtoToJson(index, {.readable = false}));
  if (!s.ok()) return s;
  return stored;
}

absl::Status TraceStore::Remove(const v1::StoredTrace& trace) {
  if (!is_local_) {
    return absl::UnimplementedError(
        absl::StrCat("removing captures from ", uri_, " is left to the bucket's lifecycle rules"));
  }
  if (absl::Status s = ValidateStoredTrace(trace, uri_); !s.ok()) return s;
  {
    // Out of the index first: a listed capture is always whole.
    MutexLock lock(&index_mu_);
    const std::string index_key = IndexKey(IndexDay(trace), trace.hostname());
    absl::StatusOr<std::vector<v1::StoredTrace>> rows =
        ReadIndex(index_key, absl::InfiniteFuture());
    if (!rows.ok()) return rows.status();
    v1::ListTracesResponse index;
    for (const v1::StoredTrace& row : *rows) {
      if (row.capture_id() != trace.capture_id()) *index.add_traces() = row;
    }
    if (absl::Status s = bucket_->PutBytes(index_key, ProtoToJson(index, {.readable = false}));
        !s.ok()) {
      return s;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(absl::StrCat(local_root_, "/", FolderKey(trace)), ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot delete ", LocationOf(trace), ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> TraceStore::Subfolders(const std::string& prefix,
                                                                absl::Time deadline) {
  absl::StatusOr<ObjectListing> listing = bucket_->List(prefix, /*delimited=*/true, deadline);
  if (!listing.ok()) return listing.status();
  std::vector<std::string> names;
  for (const std::string& f : listing->folders) names.push_back(LastElement(f));
  std::sort(names.rbegin(), names.rend());  // yyyy-mm-dd: newest first
  return names;
}

absl::StatusOr<std::vector<TraceStore::HostIndex>> TraceStore::IndexedHosts(const std::string& day,
                                                                            absl::Time deadline) {
  absl::StatusOr<ObjectListing> listing =
      bucket_->List(absl::StrCat(prefix_, kIndexFolder, day, "/"), /*delimited=*/true, deadline);
  if (!listing.ok()) return listing.status();
  std::vector<HostIndex> hosts;
  for (const ObjectInfo& o : listing->objects) {
    // Keys come from the listing: only a plain name directly in the day's folder is a host index.
    if (!absl::StartsWith(o.key, absl::StrCat(prefix_, kIndexFolder, day, "/"))) continue;
    std::string name = o.key.substr(prefix_.size() + sizeof(kIndexFolder) - 1 + day.size() + 1);
    if (!absl::EndsWith(name, ".json") || !ValidatePlainFileName(name).ok()) continue;
    std::string host = name.substr(0, name.size() - 5);
    if (!ValidatePlainFileName(host).ok()) continue;
    hosts.push_back({host, o.modified});
  }
  std::stable_sort(hosts.begin(), hosts.end(),
                   [](const HostIndex& a, const HostIndex& b) { return a.modified > b.modified; });
  return hosts;
}

absl::StatusOr<std::vector<v1::StoredTrace>> TraceStore::List(const TraceFilter& filter) {
  // A row was stored (so its index written) after its capture started, by a clock S3 keeps within
  // 15 minutes of the store's (it refuses requests more skewed): an index last written at T holds
  // no capture that started after T + 15 min.
  constexpr absl::Duration kClockSkewBound = absl::Minutes(15);
  constexpr size_t kBatch = 16;  // indexes read at once
  std::vector<v1::StoredTrace> out;
  const size_t limit = filter.limit == 0 ? 50 : filter.limit;
  absl::StatusOr<std::vector<std::string>> days =
      Subfolders(prefix_ + kIndexFolder, filter.deadline);
  if (!days.ok()) return days.status();
  for (const std::string& day : *days) {
    absl::Time day_start;
    std::string err;
    if (!absl::ParseTime("%Y-%m-%d", day, absl::UTCTimeZone(), &day_start, &err)) continue;
    if (day_start + absl::Hours(24) <= filter.since) break;  // older days follow
    std::vector<HostIndex> hosts;
    if (!filter.hostname.empty()) {
      if (absl::Status s = ValidatePlainFileName(filter.hostname); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--hostname: ", s.message()));
      }
      hosts.push_back({filter.hostname, absl::InfiniteFuture()});
    } else {
      absl::StatusOr<std::vector<HostIndex>> h = IndexedHosts(day, filter.deadline);
      if (!h.ok()) return h.status();
      hosts = *std::move(h);
    }
    // Indexes newest first, a batch at a time, until the rows in hand that no unread index can
    // beat fill the limit: a fleet's `list` reads the hosts that stored lately, not every host.
    bool enough = false;
    for (size_t first = 0; first < hosts.size() && !enough; first += kBatch) {
      std::vector<std::string> keys;
      for (size_t i = first; i < std::min(hosts.size(), first + kBatch); ++i) {
        keys.push_back(IndexKey(day, hosts[i].host));
      }
      absl::StatusOr<std::vector<v1::StoredTrace>> rows = ReadIndexes(keys, filter.deadline);
      if (!rows.ok()) return rows.status();
      for (v1::StoredTrace& row : *rows) {
        if (TraceMatches(row, filter)) out.push_back(std::move(row));
      }
      const size_t next = first + kBatch;
      if (next >= hosts.size()) break;
      const absl::Time unread_newest = hosts[next].modified + kClockSkewBound;
      size_t safe = 0;
      for (const v1::StoredTrace& row : out) {
        safe += absl::FromUnixNanos(row.started_unix_ns()) > unread_newest;
      }
      enough = safe >= limit;
    }
    // Days go newest first: once a day fills the limit, older days cannot get in.
    if (out.size() >= limit) break;
  }
  std::sort(out.begin(), out.end(), Newer);
  if (out.size() > limit) out.resize(limit);
  return out;
}

absl::StatusOr<v1::StoredTrace> TraceStore::Get(const std::string& capture_id,
                                                absl::Time deadline) {
  if (absl::Status s = ValidateCaptureId(capture_id); !s.ok()) return s;
  // A row of this id refused by ValidateStoredTrace: said as such, not "no capture".
  std::vector<std::pair<std::string, absl::Status>> refused;
  absl::Time t;
  if (TimeOfId(capture_id, &t)) {
    v1::StoredTrace probe;
    probe.set_capture_id(capture_id);
    const std::string day = IndexDay(probe);
    absl::StatusOr<std::vector<HostIndex>> hosts = IndexedHosts(day, deadline);
    if (!hosts.ok()) return hosts.status();
    // The id usually names its host: look there first.
    std::stable_partition(hosts->begin(), hosts->end(), [&](const HostIndex& h) {
      return absl::StrContains(capture_id, "-" + h.host + "-");
    });
    for (const HostIndex& h : *hosts) {
      absl::StatusOr<std::vector<v1::StoredTrace>> rows =
          ReadIndex(IndexKey(day, h.host), deadline, &refused);
      if (!rows.ok()) return rows.status();
      for (const v1::StoredTrace& row : *rows) {
        if (row.capture_id() == capture_id) return row;
      }
    }
  } else {
    TraceFilter all;
    all.limit = 100000;
    all.deadline = deadline;
    absl::StatusOr<std::vector<v1::StoredTrace>> rows = List(all);
    if (!rows.ok()) return rows.status();
    for (const v1::StoredTrace& row : *rows) {
      if (row.capture_id() == capture_id) return row;
    }
  }
  for (const auto& [id, why] : refused) {
    if (id == capture_id) {
      LogWarning("store", "%s", why.message());
      return why;
    }
  }
  return absl::NotFoundError(absl::StrCat("no capture ", capture_id, " in the store ", uri_,
                                          ": `profctl list` shows what is stored"));
}

absl::Status TraceStore::Read(const v1::StoredTrace& trace, const std::string& file,
                              const ChunkSink& sink, absl::Time deadline) {
  // The row may come from anyone (spool, index, a caller): checked again where it becomes a key.
  if (absl::Status s = ValidateStoredTrace(trace, uri_); !s.ok()) return s;
  bool known = false;
  for (const v1::StoredFile& f : trace.files()) known |= f.name() == file;
  if (!known) {
    return absl::NotFoundError(
        absl::StrCat("capture ", trace.capture_id(), " has no file named ", EscapedName(file)));
  }
  return bucket_->Read(FolderKey(trace) + file, sink, deadline);
}

}  // namespace profd::store
