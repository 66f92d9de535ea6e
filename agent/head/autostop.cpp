#include "agent/head/autostop.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "agent/head/cloud_autostop.hpp"
#include "shared/common/file_util.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {

Status ShellSpawner::SpawnDetached(const std::string& command, const std::string& log_path) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  std::string cmd = command;
  char* argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"), cmd.data(), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, "/bin/sh", &files, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return ErrnoError("cannot run /bin/sh", rc);
  return Status::Ok();
}

Autostop::Autostop(Clock& clock, CommandSpawner& spawner, std::string state_dir)
    : clock_(clock), spawner_(spawner), state_dir_(std::move(state_dir)), last_busy_(clock.Now()) {
  setting_.set_idle_minutes(-1);
}

void Autostop::Load() {
  setting_.Clear();
  setting_.set_idle_minutes(-1);
  if (auto saved_bytes = ReadFile(state_dir_ + "/autostop.pb"); saved_bytes.ok()) {
    herd::v1::SetAutostop saved;
    if (saved.ParseFromString(*saved_bytes)) setting_ = saved;
  }
}

Status Autostop::Set(const herd::v1::SetAutostop& setting) {
  const std::string key_file = CloudCredentialsPath(state_dir_);
  if (setting.idle_minutes() >= 0) {
    if (setting.server_stops()) {
      if (setting.has_cloud() || !setting.command().empty()) {
        return InvalidArgument("autostop: server_stops with a command or a cloud key");
      }
    } else if (setting.has_cloud()) {
      HERD_RETURN_IF_ERROR(ValidateCloudAutostop(setting.cloud()));
    } else if (setting.command().empty()) {
      return InvalidArgument("autostop needs a command");
    }
  }
  if (setting.idle_minutes() >= 0 && setting.has_cloud()) {
    HERD_RETURN_IF_ERROR(WriteCloudCredentials(key_file, setting.cloud()));
  }
  HERD_RETURN_IF_ERROR(WriteFileAtomic(state_dir_ + "/autostop.pb",
                                       WithoutSecret(setting).SerializeAsString(), 0644));
  if (setting.idle_minutes() < 0 || !setting.has_cloud()) std::remove(key_file.c_str());
  setting_ = WithoutSecret(setting);
  fired_ = false;
  due_ = false;
  last_busy_ = clock_.Now();  // the idle time counts from now
  HERD_LOG(kInfo) << "autostop "
                  << (setting.idle_minutes() < 0
                          ? "off"
                          : "after " + std::to_string(setting.idle_minutes()) + " idle minute(s)" +
                                (setting.down() ? " (down)" : "") +
                                (setting.server_stops() ? ", by the team server" : ""));
  return Status::Ok();
}

bool Autostop::Check(bool busy) {
  const auto now = clock_.Now();
  if (busy) last_busy_ = now;
  if (setting_.idle_minutes() < 0) return false;
  if (setting_.server_stops()) {
    const bool due = !busy && now - last_busy_ >= std::chrono::minutes(setting_.idle_minutes());
    if (due && !due_) {
      HERD_LOG(kInfo) << "idle for " << setting_.idle_minutes()
                      << " minute(s): autostop due; the team server stops the cluster";
    }
    due_ = due;
    return false;
  }
  if (fired_) {
    // A cloud head that still runs so long after asking for its own stop: the call did not
    // take; ask again (while busy again, not: a job started meanwhile keeps the cluster).
    if (!setting_.has_cloud() || busy || now - fired_at_ < limits::kCloudAutostopRefire) {
      return false;
    }
  } else if (now - last_busy_ < std::chrono::minutes(setting_.idle_minutes())) {
    return false;
  }
  fired_ = true;
  fired_at_ = now;
  const std::string command =
      setting_.has_cloud()
          ? CloudStopCommand(setting_.cloud(), setting_.down(), CloudCredentialsPath(state_dir_))
          : setting_.command();
  HERD_LOG(kInfo) << "idle for " << setting_.idle_minutes()
                  << " minute(s): running autostop: " << command;
  if (Status s = spawner_.SpawnDetached(command, state_dir_ + "/autostop.log"); !s.ok()) {
    HERD_LOG(kError) << "autostop: " << s.message();
  }
  return true;
}

}  // namespace herd::agent
