#include "controller/server/gpu_sampler.hpp"

#include <boost/json.hpp>

#include "shared/common/log.hpp"
#include "shared/common/unix_time.hpp"

namespace herd::server {

Result<std::vector<ClusterGpus>> ParseInfraGpus(std::string_view json) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(json, ec);
  if (ec) return InvalidArgument("infra -o json: " + ec.message());
  if (!v.is_array()) return InvalidArgument("infra -o json: not an array");
  std::vector<ClusterGpus> out;
  for (const auto& item : v.as_array()) {
    const auto* o = item.if_object();
    const auto* clusters = o ? o->if_contains("clusters") : nullptr;
    if (!clusters || !clusters->is_array()) continue;
    for (const auto& cv : clusters->as_array()) {
      const auto* c = cv.if_object();
      if (!c) continue;
      const auto* known = c->if_contains("gpus_known");
      const auto* name = c->if_contains("name");
      const auto* gpus = c->if_contains("gpus");
      const auto* in_use = c->if_contains("gpus_in_use");
      if (!known || !known->is_bool() || !known->as_bool() || !name || !name->is_string() ||
          !gpus || !gpus->is_int64() || !in_use || !in_use->is_int64()) {
        continue;
      }
      out.push_back({std::string(name->as_string()), gpus->as_int64(), in_use->as_int64()});
    }
  }
  return out;
}

GpuSampler::GpuSampler(GpuSamplerParts parts, limits::Duration pass_timeout)
    : parts_(std::move(parts)), pass_timeout_(pass_timeout) {
  if (!parts_.steady_now) parts_.steady_now = [] { return std::chrono::steady_clock::now(); };
  if (!parts_.now_ms) parts_.now_ms = [] { return NowUnixMs(); };
}

GpuSampler::~GpuSampler() { Stop(); }

GpuSamplePass GpuSampler::RunPass(std::stop_token stop) {
  GpuSamplePass pass;
  std::unique_lock<std::mutex> running(pass_mu_, std::try_to_lock);
  if (!running.owns_lock() || stop.stop_requested()) return pass;
  pass.ran = true;
  const auto deadline = parts_.steady_now() + pass_timeout_;
  auto users = parts_.users();
  if (!users.ok()) {
    HERD_LOG(kWarn) << "GPU samples: the users: " << users.status().message();
    ++pass.errors;
    return pass;
  }
  for (std::size_t i = 0; i < users->size(); ++i) {
    if (stop.stop_requested() || parts_.steady_now() >= deadline) {
      pass.users_skipped = users->size() - i;
      break;
    }
    const std::string& user = (*users)[i];
    ++pass.users;
    auto read = parts_.read(user, deadline, stop);
    if (!read.ok()) {
      ++pass.errors;
      HERD_LOG(kDebug) << "GPU samples of " << user << ": " << read.status().message();
      continue;
    }
    // The read's time, not the pass's start: a sample says when the heads answered.
    const std::int64_t now_ms = parts_.now_ms();
    for (const ClusterGpus& c : *read) {
      auto r = parts_.record(c, now_ms);
      if (!r.ok()) {
        ++pass.errors;
        HERD_LOG(kWarn) << "GPU sample of " << c.cluster << ": " << r.status().message();
      } else if (*r) {
        ++pass.recorded;
      } else {
        ++pass.already;
      }
    }
  }
  if (pass.users_skipped > 0) {
    HERD_LOG(kWarn) << "GPU samples: " << pass.users_skipped
                    << " user(s) not reached within the pass's time; next pass";
  }
  return pass;
}

void GpuSampler::Start(limits::Duration interval) {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable()) return;
  thread_ = std::jthread([this, interval](std::stop_token stop) { Loop(stop, interval); });
}

void GpuSampler::Kick() {
  {
    std::lock_guard<std::mutex> l(mu_);
    kicked_ = true;
  }
  cv_.notify_all();
}

void GpuSampler::Stop() {
  std::jthread t;
  {
    std::lock_guard<std::mutex> l(mu_);
    t = std::move(thread_);
  }
  if (!t.joinable()) return;
  t.request_stop();  // wakes the wait below and interrupts a read in progress
  t.join();
}

void GpuSampler::Loop(std::stop_token stop, limits::Duration interval) {
  while (!stop.stop_requested()) {
    RunPass(stop);
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, stop, interval, [this] { return kicked_; });
    kicked_ = false;
  }
}

}  // namespace herd::server
