#include "controller/ops/container_check.hpp"

#include <cstddef>

#include "controller/ssh/parallel.hpp"
#include "controller/ssh/ssh_command.hpp"
#include "shared/common/agent_layout.hpp"
#include "shared/common/limits.hpp"

namespace herd::ops {
namespace {

std::string LastLine(const std::string& text) {
  std::string last;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) last = line;
    start = end + 1;
  }
  return last;
}

std::string Lookup(const std::map<std::string, std::string>& envs,
                   const std::map<std::string, std::string>& secrets, const char* key) {
  if (auto it = secrets.find(key); it != secrets.end()) return it->second;
  if (auto it = envs.find(key); it != envs.end()) return it->second;
  return "";
}

}  // namespace

std::string RuntimeCheckCommand(const std::string& herdlet, const std::string& image, bool login) {
  return "cd && " + controller::ShellQuote(herdlet) + " " + kContainerCheckFlag + " " +
         controller::ShellQuote(image) + (login ? " --login-stdin" : "");
}

std::string RuntimeCheckLogin(const std::map<std::string, std::string>& envs,
                              const std::map<std::string, std::string>& secrets) {
  const std::string user = Lookup(envs, secrets, kDockerUserEnv);
  if (user.empty()) return "";
  return user + "\n" + Lookup(envs, secrets, kDockerServerEnv) + "\n" +
         Lookup(envs, secrets, kDockerPasswordEnv) + "\n";
}

Status CheckNodesForImage(controller::SshRunner& ssh, const std::vector<NodeToCheck>& nodes,
                          const std::string& herdlet, const std::string& image,
                          const std::map<std::string, std::string>& envs,
                          const std::map<std::string, std::string>& secrets) {
  const std::string login = RuntimeCheckLogin(envs, secrets);
  const std::string command = RuntimeCheckCommand(herdlet, image, !login.empty());
  // A check runs the runtime once and logs in once, each bounded by the agent.
  const auto timeout = 2 * limits::kContainerCommandTimeout + limits::kSshConnectTimeout;
  std::vector<Status> results(nodes.size());
  (void)controller::ForEachParallel(nodes.size(), [&](std::size_t i) -> Status {
    const std::string where = "node " + nodes[i].name + ", image " + image + ": ";
    auto r = ssh.Run(nodes[i].target, command, timeout, login);
    if (!r.ok()) {
      results[i] = Status(r.status().code(),
                          where + "cannot check for a container runtime: " + r.status().message());
    } else if (r->timed_out) {
      results[i] = DeadlineExceeded(where + "the check for a container runtime did not finish");
    } else if (r->exit_code == kContainerErrorExit) {
      std::string why = LastLine(r->err);
      if (why.rfind("herd: ", 0) == 0) why = why.substr(6);
      const bool refused = why.find("refused the login") != std::string::npos;
      results[i] = refused ? PermissionDenied(where + why) : FailedPrecondition(where + why);
    } else if (r->exit_code != 0) {
      const std::string why = LastLine(r->err);
      results[i] = FailedPrecondition(
          where + "cannot check for a container runtime: " + (why.empty() ? "no output" : why) +
          " (exit " + std::to_string(r->exit_code) + ")");
    }
    return results[i];
  });
  Status first;
  int failed = 0;
  for (const Status& s : results) {
    if (s.ok()) continue;
    if (failed++ == 0) first = s;
  }
  if (failed <= 1) return first;
  return Status(first.code(), first.message() + " (and " + std::to_string(failed - 1) +
                                  " other node" + (failed > 2 ? "s" : "") + ")");
}

}  // namespace herd::ops
