// The server's autostop of its users' cloud clusters. Under a team server no cloud key goes to a
// head (ChildEnv sets kAutostopByServerEnv, so `herd autostop` and `launch -i/--down` ask the
// head only to report its autostop due): every limits::kServerAutostopSweepInterval the server
// runs `herd _autostop-sweep` as each user whose cluster store holds a cluster it would ask (a
// child like a command's, with this server's cloud credentials in its environment), which asks
// that user's heads and stops (tears down) the clusters that are due through the cluster's lock,
// as `herd stop` (`herd down`) does. A user's sweep still running when the next is due (a stop in
// progress) is left to finish; Stop interrupts the sweeps still running and waits for them.
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>

#include "controller/server/server_impl.hpp"
#include "controller/state/cluster_store.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::server::detail {

namespace fs = std::filesystem;

namespace {

// Whether the user's cluster store (read here, one query) holds a cluster the sweep would ask
// (controller::ServerSweepsAutostop), so that an idle server starts no process for users without
// one. A store that cannot be read is left to the sweep, which says why in the log.
bool HasClustersToSweep(const std::string& state_db) {
  std::error_code ec;
  if (!fs::exists(state_db, ec)) return false;
  auto store = controller::ClusterStore::Open(state_db);
  if (!store.ok()) return true;
  auto all = (*store)->List();
  if (!all.ok()) return true;
  for (const controller::ClusterRecord& c : *all) {
    if (controller::ServerSweepsAutostop(c)) return true;
  }
  return false;
}

}  // namespace

void ServerImpl::StartAutostopSweeps() {
  autostop_thread_ = std::jthread([this](std::stop_token stop) {
    // The sweeps running, by user; only this thread touches it. They are started from this
    // thread, which lives until Stop (PR_SET_PDEATHSIG ends them with it).
    std::map<std::string, std::shared_ptr<RunningCommand>> running;
    std::mutex mu;
    std::condition_variable_any wake;
    while (!stop.stop_requested()) {
      SweepAutostop(running);
      std::unique_lock<std::mutex> l(mu);
      wake.wait_for(l, stop, limits::kServerAutostopSweepInterval, [] { return false; });
    }
    for (auto& [user, cmd] : running) cmd->Cancel();
    for (auto& [user, cmd] : running) cmd->Wait();
  });
}

void ServerImpl::StopAutostopSweeps() {
  if (!autostop_thread_.joinable()) return;
  autostop_thread_.request_stop();
  autostop_thread_.join();
}

void ServerImpl::SweepAutostop(std::map<std::string, std::shared_ptr<RunningCommand>>& running) {
  for (auto it = running.begin(); it != running.end();) {
    if (it->second->done()) {
      it->second->Wait();
      it = running.erase(it);
    } else {
      ++it;
    }
  }
  auto users = store_->ListUsers();
  if (!users.ok()) {
    HERD_LOG(kWarn) << "autostop sweep: the users: " << users.status().message();
    return;
  }
  for (const auto& u : *users) {
    if (running.count(u.name) || !HasClustersToSweep(home_.UserHome(u.name) + "/herd/state.db")) {
      continue;
    }
    CommandSpec spec;
    spec.argv = {options_.herd_binary, "_autostop-sweep"};
    spec.env = ChildEnv(u.name, false);
    spec.cwd = home_.UserHome(u.name);
    auto out = std::make_shared<std::string>();
    auto cmd = RunningCommand::Start(std::move(spec), [out](FrameTag, std::string_view bytes) {
      if (out->size() + bytes.size() <= limits::kApiMaxBodyBytes) out->append(bytes);
    });
    if (!cmd.ok()) {
      HERD_LOG(kWarn) << "autostop sweep of " << u.name << ": " << cmd.status().message();
      continue;
    }
    (*cmd)->OnExit([out, user = u.name](int code) {
      // The output callback and this run on the command's reader thread, one after the other.
      // A line of the log per line of output (the clusters stopped, the providers' notes).
      std::size_t at = 0;
      while (at < out->size()) {
        std::size_t nl = out->find('\n', at);
        if (nl == std::string::npos) nl = out->size();
        if (nl > at) {
          HERD_LOG(kInfo) << "autostop sweep of " << user << ": " << out->substr(at, nl - at);
        }
        at = nl + 1;
      }
      if (code != 0) {
        HERD_LOG(kWarn) << "autostop sweep of " << user << " exited " << code;
      }
    });
    running[u.name] = std::move(*cmd);
  }
}

}  // namespace herd::server::detail
