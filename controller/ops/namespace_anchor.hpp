// The local provider's autostop: a node's head runs `herd stop|down` on this machine by entering
// the controller's network and mount namespaces (nsenter --target PID). PID 1's namespaces may be
// out of reach (a sandboxed init), so a process of ours pins them: a `sleep infinity` that
// outlives the command, its pid kept in the cluster's state directory.
#pragma once

#include "controller/state/cluster_record.hpp"
#include "shared/common/status.hpp"

namespace herd::ops {

// The anchor's pid, started when none of the cluster's is alive.
Result<int> EnsureNamespaceAnchor(const controller::ClusterRecord& c);
// Ends the cluster's anchor, if alive (Down).
void KillNamespaceAnchor(const controller::ClusterRecord& c);

}  // namespace herd::ops
