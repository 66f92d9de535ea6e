// The server's GPU sampler (gpu_sampler.hpp) over this server's parts: the users with clusters in
// the shared state, each read as the user's own `herd infra -o json` (a child process like a
// command's, interrupted at the pass's deadline or the server's stop), and the store's samples.
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "controller/server/server_impl.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"
#include "shared/common/unix_time.hpp"

namespace herd::server::detail {

namespace fs = std::filesystem;

Status ServerImpl::StartSampler() {
  std::weak_ptr<ServerImpl> weak = shared_from_this();
  GpuSamplerParts parts;
  parts.users = [weak]() -> Result<std::vector<std::string>> {
    auto self = weak.lock();
    if (!self) return Unavailable("the server is stopping");
    return self->UsersWithClusters();
  };
  parts.read = [weak](const std::string& user, GpuSamplerParts::SteadyTime deadline,
                      std::stop_token stop) -> Result<std::vector<ClusterGpus>> {
    auto self = weak.lock();
    if (!self) return Unavailable("the server is stopping");
    return self->ReadGpus(user, deadline, stop);
  };
  parts.record = [weak](const ClusterGpus& s, std::int64_t now_ms) -> Result<bool> {
    auto self = weak.lock();
    if (!self) return Unavailable("the server is stopping");
    return self->store_->RecordGpuSample(s.cluster, s.gpus, s.in_use, now_ms);
  };
  sampler_ = std::make_unique<GpuSampler>(std::move(parts));
  sampler_->Start();
  return Status::Ok();
}

// Every user whose home holds a cluster (of any kind: launched, a managed job's) that is due a
// sample, by name. Due: the store has none of it from the last interval, so it would record one
// (ApiStore::RecordGpuSample's rule); a user whose clusters all have theirs is not read again (a
// pass kicked by each of a flood of commands then costs a few queries, not a `herd infra` each).
Result<std::vector<std::string>> ServerImpl::UsersWithClusters() {
  HERD_ASSIGN_OR_RETURN(auto users, store_->ListUsers());
  const std::int64_t since = NowUnixMs() - GpuSampleBounds::Default().interval_ms;
  std::vector<std::string> out;
  for (const auto& u : users) {
    std::error_code ec;
    bool due = false;
    for (fs::directory_iterator it(home_.UserHome(u.name) + "/herd/clusters", ec), end;
         !ec && it != end && !due; it.increment(ec)) {
      auto recent = store_->ListGpuSamples(it->path().filename().string(), since);
      due = !recent.ok() || recent->empty();
    }
    if (due) out.push_back(u.name);
  }
  return out;
}

Result<std::vector<ClusterGpus>> ServerImpl::ReadGpus(const std::string& user,
                                                      GpuSamplerParts::SteadyTime deadline,
                                                      std::stop_token stop) {
  struct Read {
    std::mutex mu;
    std::condition_variable cv;
    std::string out, err;
    bool too_big = false;
    bool exited = false;
  };
  auto read = std::make_shared<Read>();
  CommandSpec spec;
  spec.argv = {options_.herd_binary, "infra", "-o", "json"};
  spec.env = ChildEnv(user, false);
  spec.cwd = home_.UserHome(user);
  HERD_ASSIGN_OR_RETURN(
      auto cmd, RunningCommand::Start(std::move(spec), [read](FrameTag tag, std::string_view b) {
        std::lock_guard<std::mutex> l(read->mu);
        std::string& to = tag == FrameTag::kStderr ? read->err : read->out;
        if (to.size() + b.size() > limits::kApiMaxBodyBytes) {
          read->too_big = true;
        } else {
          to.append(b);
        }
      }));
  cmd->OnExit([read](int) {
    std::lock_guard<std::mutex> l(read->mu);
    read->exited = true;
    read->cv.notify_all();
  });
  bool in_time;
  {
    std::stop_callback on_stop(stop, [read] {
      std::lock_guard<std::mutex> l(read->mu);
      read->cv.notify_all();
    });
    std::unique_lock<std::mutex> l(read->mu);
    in_time = read->cv.wait_until(l, deadline, [&] {
      return read->exited || stop.stop_requested();
    }) && read->exited;
  }
  if (!in_time) cmd->Cancel();
  const int code = cmd->Wait();
  std::lock_guard<std::mutex> l(read->mu);
  if (!in_time) {
    return DeadlineExceeded(stop.stop_requested() ? "the server is stopping"
                                                  : "`herd infra` did not end within the pass");
  }
  if (read->too_big)
    return FailedPrecondition("`herd infra -o json` printed more than the server reads");
  if (code != 0) {
    std::string why = read->err;
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    if (auto nl = why.rfind('\n'); nl != std::string::npos) why = why.substr(nl + 1);
    return FailedPrecondition("`herd infra` exited with " + std::to_string(code) + ": " + why);
  }
  return ParseInfraGpus(read->out);
}

}  // namespace herd::server::detail
