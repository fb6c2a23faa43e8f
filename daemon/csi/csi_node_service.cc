#include "daemon/csi/csi_node_service.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/grpc_status.h"
#include "daemon/log.h"

namespace profd {
namespace {

constexpr char kComponent[] = "csi";
constexpr char kKinetoFolder[] = "kineto";

// Whether `path` is the root of a mount (a bind mount shares the device of its source, so the
// device number cannot tell).
absl::StatusOr<bool> IsMountRoot(const std::string& path) {
  struct statx st {};
  if (statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &st) != 0) {
    if (errno == ENOENT) return false;
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  if ((st.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) == 0) {
    return absl::InternalError("this kernel does not report mount roots (statx, Linux 5.8+)");
  }
  return (st.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
}

std::string Errno(const char* what, const std::string& path) {
  return absl::StrCat(what, " ", path, ": ", std::strerror(errno));
}

}  // namespace

absl::Status CsiVolumePublisher::CheckTarget(const std::string& target_path) const {
  const std::string& root = options_.target_root;
  if (target_path.empty()) return absl::InvalidArgumentError("target_path is empty");
  // Plain absolute path, under the root: no "." or ".." to climb out, no empty segment.
  bool plain = target_path[0] == '/';
  for (absl::string_view segment : absl::StrSplit(absl::string_view(target_path).substr(1), '/')) {
    if (segment.empty() || segment == "." || segment == "..") plain = false;
  }
  if (!plain || !absl::StartsWith(target_path, root + "/")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target_path ", target_path, " is refused: profd mounts only at plain paths under ", root,
        " (--csi_target_root, the kubelet's pod folder)"));
  }
  return absl::OkStatus();
}

absl::Status CsiVolumePublisher::Publish(const std::string& target_path, const std::string& folder,
                                         const std::string& pod) {
  if (absl::Status s = CheckTarget(target_path); !s.ok()) return s;
  std::string source;
  bool read_only = true;
  if (folder.empty()) {
    source = options_.runtime_dir;
  } else if (folder == kKinetoFolder && options_.kineto_dir != "none") {
    source = options_.kineto_dir;
    read_only = false;  // Kineto binds its own socket in it (the folder is sticky)
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("volumeAttributes folder \"", folder,
                     "\" is not one profd serves: leave it out for the "
                     "agent and its socket, or \"kineto\" for Kineto's socket folder",
                     options_.kineto_dir == "none" ? " (off here: --kineto_socket_dir=none)" : ""));
  }
  if (mkdir(target_path.c_str(), 0750) != 0 && errno != EEXIST) {
    return absl::InternalError(Errno("cannot create", target_path));
  }
  absl::StatusOr<bool> mounted = IsMountRoot(target_path);
  if (!mounted.ok()) return mounted.status();
  if (*mounted) return absl::OkStatus();  // published before: the kubelet retries
  if (mount(source.c_str(), target_path.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return absl::InternalError(absl::StrCat(Errno("cannot bind-mount", source), " at ", target_path,
                                            " (profd needs CAP_SYS_ADMIN)"));
  }
  // Bind mounts take their flags from a remount. The agent folder stays executable: the pod
  // maps the library from it.
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV;
  if (read_only) flags |= MS_RDONLY;
  if (!read_only) flags |= MS_NOEXEC;
  if (mount(nullptr, target_path.c_str(), nullptr, flags, nullptr) != 0) {
    std::string why = Errno("cannot remount", target_path);
    umount2(target_path.c_str(), MNT_DETACH);
    return absl::InternalError(why);
  }
  LogInfo(kComponent, "mounted %s (%s) for pod %s at %s", source,
          read_only ? "read-only" : "read-write", pod.empty() ? "?" : pod, target_path);
  return absl::OkStatus();
}

absl::Status CsiVolumePublisher::Unpublish(const std::string& target_path) {
  if (absl::Status s = CheckTarget(target_path); !s.ok()) return s;
  absl::StatusOr<bool> mounted = IsMountRoot(target_path);
  if (!mounted.ok()) return mounted.status();
  if (*mounted && umount2(target_path.c_str(), 0) != 0 &&
      umount2(target_path.c_str(), MNT_DETACH) != 0) {
    return absl::InternalError(Errno("cannot unmount", target_path));
  }
  if (rmdir(target_path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(Errno("cannot remove", target_path));
  }
  if (*mounted) LogInfo(kComponent, "unmounted %s", target_path);
  return absl::OkStatus();
}

grpc::Status CsiIdentityService::GetPluginInfo(grpc::ServerContext*,
                                               const csi::v1::GetPluginInfoRequest*,
                                               csi::v1::GetPluginInfoResponse* response) {
  response->set_name(options_->driver_name);
  response->set_vendor_version(PROFD_VERSION);
  return grpc::Status::OK;
}

grpc::Status CsiIdentityService::GetPluginCapabilities(grpc::ServerContext*,
                                                       const csi::v1::GetPluginCapabilitiesRequest*,
                                                       csi::v1::GetPluginCapabilitiesResponse*) {
  return grpc::Status::OK;  // node service only: no controller
}

grpc::Status CsiIdentityService::Probe(grpc::ServerContext*, const csi::v1::ProbeRequest*,
                                       csi::v1::ProbeResponse* response) {
  response->mutable_ready()->set_value(true);
  return grpc::Status::OK;
}

grpc::Status CsiNodeService::NodePublishVolume(grpc::ServerContext*,
                                               const csi::v1::NodePublishVolumeRequest* request,
                                               csi::v1::NodePublishVolumeResponse*) {
  if (request->volume_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "volume_id is empty");
  }
  const auto& context = request->volume_context();
  auto value = [&context](const char* key) {
    auto it = context.find(key);
    return it == context.end() ? std::string() : it->second;
  };
  std::string pod = value("csi.storage.k8s.io/pod.name");
  if (!pod.empty()) {
    pod = absl::StrCat(value("csi.storage.k8s.io/pod.namespace"), "/", pod, " (uid ",
                       value("csi.storage.k8s.io/pod.uid"), ")");
  }
  return ToGrpcStatus(publisher_->Publish(request->target_path(), value("folder"), pod));
}

grpc::Status CsiNodeService::NodeUnpublishVolume(grpc::ServerContext*,
                                                 const csi::v1::NodeUnpublishVolumeRequest* request,
                                                 csi::v1::NodeUnpublishVolumeResponse*) {
  if (request->volume_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "volume_id is empty");
  }
  return ToGrpcStatus(publisher_->Unpublish(request->target_path()));
}

grpc::Status CsiNodeService::NodeGetCapabilities(grpc::ServerContext*,
                                                 const csi::v1::NodeGetCapabilitiesRequest*,
                                                 csi::v1::NodeGetCapabilitiesResponse*) {
  return grpc::Status::OK;  // no stage step, no volume stats: a bind mount of a local folder
}

grpc::Status CsiNodeService::NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest*,
                                         csi::v1::NodeGetInfoResponse* response) {
  response->set_node_id(publisher_->options().node_id);
  return grpc::Status::OK;
}

}  // namespace profd
