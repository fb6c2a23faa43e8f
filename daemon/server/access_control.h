// Who may use profd on this host, enforced by the kernel's file permissions: the control socket
// and every folder that holds traces belong to profd's user (root) and to one access group
// (--access_group), and nobody else. Called once from profd_main at start, before any listener
// or writer exists; nothing here runs later.
//
//   control socket           root:<group> 0660 (0600 without a group)
//   capture, spool, store    root:<group> 2750 (setgid: what is created inside keeps the group)
//   files written by profd   0640 (umask 027 for the whole process)
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace profd {

struct AccessGroup {
  bool configured = false;  // --access_group given; else the group is profd's own and unused
  gid_t gid = 0;
  std::string name;  // for messages: the group's name, or its number when it has none
};

// --access_group: a group name or a numeric gid ("" = none: root only). INVALID_ARGUMENT for a
// name that does not exist.
absl::StatusOr<AccessGroup> ResolveAccessGroup(const std::string& flag);

// Sets umask 027 for the whole process: every file profd writes is 0640, every folder 0750.
// Returns the previous mask.
mode_t RestrictUmask();

// A folder that may hold sockets others must reach (the agent socket, 0666): created 0755 when
// missing; an existing one is left as it is.
absl::Status MakeSocketFolder(const std::string& path);

// The control socket after bind: owner profd, group `group`, mode 0660 (0600 without a group).
absl::Status SecureControlSocket(const std::string& path, const AccessGroup& group);

// A folder profd writes traces into (--capture_dir, --spool_dir, a local --store): created when
// missing (missing parents too, 0750 with the group so its members can get through), then set to
// profd's user, the group, and 2750; its direct sub-folders owned by profd get the same group and
// mode, so what an older profd left there follows. Refuses a folder another user owns or that is
// shared (world-writable or sticky, such as /tmp): profd would hand it to the group or be tricked
// into writing where someone else can replace files.
absl::Status PrepareDataFolder(const std::string& flag, const std::string& path,
                               const AccessGroup& group);

}  // namespace profd
