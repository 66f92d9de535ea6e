// File helpers both modes of the local provider (network namespaces, user-mode sshd) use for
// their node directories.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "shared/common/status.hpp"

namespace herd::controller::node_files {

// The file's bytes; nothing when it is absent or unreadable.
std::optional<std::string> ReadIfAny(const std::string& path);
// /proc/PID/<what>, "" when the process is gone.
std::string ReadProc(pid_t pid, const char* what);
// The last `bytes` of a log for an error message, "(empty)" when there is none.
std::string Tail(const std::string& path, size_t bytes);
// mkdir -p, then chmod mode.
Status MakeDir(const std::string& path, mode_t mode);
// Rewrites (atomically) only when the content differs, so a repeated Provision changes nothing.
Status WriteIfChanged(const std::string& path, const std::string& content, mode_t mode);

// The files every local node has in `dir` (0700): home/ (0700), an ed25519 host key, made once
// and kept so that known_hosts stays valid, and authorized_keys holding public_key. Without a
// public_key (a node started again), authorized_keys must already be there. `name` is the node's,
// for the key's comment and for messages.
Status EnsureNodeFiles(const std::string& dir, const std::string& name,
                       const std::string* public_key);

}  // namespace herd::controller::node_files
