// Autostop: the cluster's own idle timer on the head. After idle_minutes with no active job the
// head runs the command `herd autostop` gave it (stop or down this cluster) once, detached; for a
// cloud cluster (SetAutostop.cloud) the command is the cloud call of cloud_autostop.hpp, made
// again every limits::kCloudAutostopRefire while the head still runs idle. A cluster that its team
// server stops (SetAutostop.server_stops) runs nothing: the head only says, in its NodesReply,
// that it has been idle long enough (due()), and the server stops it. The setting survives a
// head restart (<state_dir>/autostop.pb, without the cloud key, which is kept 0600 apart).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "herd/v1/client.pb.h"
#include "shared/common/clock.hpp"
#include "shared/common/status.hpp"

namespace herd::agent {

// Starts a shell command that outlives its caller: in a session of its own (stopping the cluster
// stops the head's agent too), stdin from /dev/null, stdout and stderr appended to log_path.
class CommandSpawner {
 public:
  virtual ~CommandSpawner() = default;
  virtual Status SpawnDetached(const std::string& command, const std::string& log_path) = 0;
};

// posix_spawn of /bin/sh -c COMMAND.
class ShellSpawner final : public CommandSpawner {
 public:
  Status SpawnDetached(const std::string& command, const std::string& log_path) override;
};

class Autostop {
 public:
  // state_dir holds autostop.pb (the setting) and autostop.log (the command's output).
  Autostop(Clock& clock, CommandSpawner& spawner, std::string state_dir);

  // The saved setting, if any (off otherwise). Idle time counts from construction.
  void Load();
  // A new setting from `herd autostop` (idle_minutes < 0: off): saved, then the idle time counts
  // from now and the command may fire again. InvalidArgument without a command, cloud setting or
  // server_stops, with server_stops beside either of the others, or with a cloud setting that
  // ValidateCloudAutostop refuses. The cloud key is written to its file, and
  // removed when the setting is off or has no cloud.
  Status Set(const herd::v1::SetAutostop& setting);
  // Every node check: busy while the head has an active job. Runs the command once idle_minutes
  // have passed since the head was last busy (or the setting was made), and a cloud call again
  // every kCloudAutostopRefire while still idle; true when it ran now. With server_stops it runs
  // nothing and only updates due().
  bool Check(bool busy);
  // server_stops: idle for idle_minutes as of the last Check (a job since then clears it).
  bool due() const { return due_; }

  const herd::v1::SetAutostop& setting() const { return setting_; }
  bool fired() const { return fired_; }

 private:
  Clock& clock_;
  CommandSpawner& spawner_;
  std::string state_dir_;
  herd::v1::SetAutostop setting_;  // idle_minutes < 0: off
  std::chrono::steady_clock::time_point last_busy_;
  std::chrono::steady_clock::time_point fired_at_;
  bool fired_ = false;
  bool due_ = false;
};

}  // namespace herd::agent
