#include "agent/gpu/health_watch.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <map>

#include "agent/gpu/nvml_api.hpp"
#include "agent/gpu/run_captured.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {
namespace {

// NVIDIA's XID catalog (docs.nvidia.com "XID Errors"), the ones that name hardware.
const std::map<uint64_t, const char*>& DrainingXids() {
  static const std::map<uint64_t, const char*> xids = {
      {48, "double-bit ECC error"},
      {61, "internal micro-controller breakpoint"},
      {62, "internal micro-controller halt"},
      {63, "ECC page retirement or row remapping recording event"},
      {64, "ECC page retirement or row remapper recording failure"},
      {74, "NVLink error"},
      {79, "GPU has fallen off the bus"},
      {92, "high single-bit ECC error rate"},
      {94, "contained ECC error"},
      {95, "uncontained ECC error"},
      {119, "GSP RPC timeout"},
      {120, "GSP error"},
  };
  return xids;
}

std::string Cut(std::string s) {
  if (s.size() > limits::kMaxDrainReasonBytes) s.resize(limits::kMaxDrainReasonBytes);
  return s;
}

class NvmlFaults final : public GpuFaultSource {
 public:
  ~NvmlFaults() override {
    if (events_ && free_set_) free_set_(events_);
    if (shutdown_) shutdown_();
    if (lib_) ::dlclose(lib_);
  }

  static std::unique_ptr<GpuFaultSource> Open(const std::string& library) {
    auto f = std::unique_ptr<NvmlFaults>(new NvmlFaults());
    f->lib_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!f->lib_) return nullptr;
    auto sym = [&](const char* name) { return ::dlsym(f->lib_, name); };
    auto init = reinterpret_cast<nvml::InitFn>(sym("nvmlInit_v2"));
    f->shutdown_ = reinterpret_cast<nvml::ShutdownFn>(sym("nvmlShutdown"));
    auto get_count = reinterpret_cast<nvml::GetCountFn>(sym("nvmlDeviceGetCount_v2"));
    f->get_handle_ = reinterpret_cast<nvml::GetHandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
    f->ecc_ = reinterpret_cast<nvml::GetTotalEccErrorsFn>(sym("nvmlDeviceGetTotalEccErrors"));
    auto create_set = reinterpret_cast<nvml::EventSetCreateFn>(sym("nvmlEventSetCreate"));
    auto register_events =
        reinterpret_cast<nvml::RegisterEventsFn>(sym("nvmlDeviceRegisterEvents"));
    f->wait_ = reinterpret_cast<nvml::EventSetWaitFn>(sym("nvmlEventSetWait_v2"));
    f->free_set_ = reinterpret_cast<nvml::EventSetFreeFn>(sym("nvmlEventSetFree"));
    if (!init || !f->shutdown_ || !get_count || !f->get_handle_) return nullptr;
    if (init() != nvml::kSuccess) {
      f->shutdown_ = nullptr;  // not initialised: nothing to shut down
      return nullptr;
    }
    unsigned int count = 0;
    if (get_count(&count) != nvml::kSuccess || count == 0) return nullptr;
    f->count_ = count;
    // XID events, where the driver offers them (not on every GPU or in every container).
    if (create_set && register_events && f->wait_ && f->free_set_ &&
        create_set(&f->events_) == nvml::kSuccess) {
      for (unsigned int i = 0; i < count; ++i) {
        nvml::nvmlDevice_t d = nullptr;
        if (f->get_handle_(i, &d) != nvml::kSuccess) continue;
        f->devices_[d] = i;
        if (register_events(d, nvml::kEventTypeXidCriticalError, f->events_) != nvml::kSuccess) {
          HERD_LOG(kDebug) << "GPU " << i << ": XID events not available";
        }
      }
    }
    return f;
  }

  std::vector<std::string> Poll() override {
    std::vector<std::string> faults;
    for (unsigned int i = 0; i < count_; ++i) {
      nvml::nvmlDevice_t d = nullptr;
      const nvml::nvmlReturn_t rc = get_handle_(i, &d);
      if (rc == nvml::kErrorGpuIsLost) {
        faults.push_back("GPU " + std::to_string(i) + ": " + DescribeXid(79));
        continue;
      }
      if (rc != nvml::kSuccess || !ecc_) continue;
      unsigned long long errors = 0;
      const nvml::nvmlReturn_t erc =
          ecc_(d, nvml::kMemoryErrorTypeUncorrected, nvml::kVolatileEcc, &errors);
      if (erc == nvml::kErrorGpuIsLost) {
        faults.push_back("GPU " + std::to_string(i) + ": " + DescribeXid(79));
      } else if (erc == nvml::kSuccess && errors > 0) {
        faults.push_back("GPU " + std::to_string(i) + ": " + std::to_string(errors) +
                         " uncorrectable ECC error(s)");
      }
    }
    // Every XID event queued since the last poll (a zero timeout: none waits).
    for (int n = 0; events_ && n < 64; ++n) {
      nvml::EventData data{};
      if (wait_(events_, &data, 0) != nvml::kSuccess) break;
      if (data.event_type != nvml::kEventTypeXidCriticalError) continue;
      const auto gpu = devices_.find(data.device);
      const std::string which =
          gpu == devices_.end() ? "a GPU" : "GPU " + std::to_string(gpu->second);
      if (XidDrains(data.event_data)) {
        faults.push_back(which + ": " + DescribeXid(data.event_data));
      } else {
        HERD_LOG(kWarn) << which << ": " << DescribeXid(data.event_data)
                        << " (an application error, the node stays in use)";
      }
    }
    return faults;
  }

 private:
  NvmlFaults() = default;
  void* lib_ = nullptr;
  nvml::ShutdownFn shutdown_ = nullptr;
  nvml::GetHandleFn get_handle_ = nullptr;
  nvml::GetTotalEccErrorsFn ecc_ = nullptr;
  nvml::EventSetWaitFn wait_ = nullptr;
  nvml::EventSetFreeFn free_set_ = nullptr;
  nvml::nvmlEventSet_t events_ = nullptr;
  unsigned int count_ = 0;
  std::map<nvml::nvmlDevice_t, unsigned int> devices_;
};

}  // namespace

bool XidDrains(uint64_t xid) { return DrainingXids().count(xid) > 0; }

std::string DescribeXid(uint64_t xid) {
  auto it = DrainingXids().find(xid);
  return "XID " + std::to_string(xid) +
         (it != DrainingXids().end() ? " (" + std::string(it->second) + ")" : std::string());
}

std::unique_ptr<GpuFaultSource> OpenNvmlFaults(const std::string& library) {
  return NvmlFaults::Open(library);
}

std::optional<std::string> RunHealthCheckCommand(const std::string& command) {
  const CapturedRun run = RunCaptured({"/bin/sh", "-c", command}, limits::kHealthCheckTimeout,
                                      /*with_stderr=*/true, limits::kMaxDrainReasonBytes);
  if (run.ok()) return std::nullopt;
  std::string why = "health check `" + command + "` ";
  if (!run.spawned) {
    why += "could not run: " + run.output;
  } else if (run.timed_out) {
    why += "did not finish within " + std::to_string(limits::kHealthCheckTimeout.count() / 1000) +
           " s";
  } else {
    why += "exited " + std::to_string(run.exit_code);
    // Its first line of output says what it found.
    std::string line = run.output.substr(0, run.output.find('\n'));
    if (!line.empty()) why += ": " + line;
  }
  return Cut(why);
}

HealthWatch::HealthWatch(Clock& clock, Options options, std::unique_ptr<GpuFaultSource> gpus,
                         HealthCheckRunner runner)
    : clock_(clock),
      options_(std::move(options)),
      gpus_(std::move(gpus)),
      runner_(std::move(runner)) {
  next_gpu_ = next_check_ = clock_.Now();
}

bool HealthWatch::Tick() {
  const auto now = clock_.Now();
  if (gpus_ && now >= next_gpu_) {
    for (auto& fault : gpus_->Poll()) {
      HERD_LOG(kError) << "GPU fault: " << fault;
      if (gpu_fault_.empty()) gpu_fault_ = fault;
    }
    next_gpu_ = now + options_.gpu_interval;
  }
  if (!options_.check_command.empty() && now >= next_check_) {
    check_failure_ = runner_(options_.check_command).value_or("");
    if (!check_failure_.empty()) {
      HERD_LOG(kError) << check_failure_;
    }
    // From the end of this run: a slow check does not run back to back.
    next_check_ = clock_.Now() + options_.check_interval;
  }
  HealthVerdict v;
  if (!gpu_fault_.empty()) {
    v = {false, Cut(gpu_fault_)};
  } else if (!check_failure_.empty()) {
    v = {false, check_failure_};
  }
  if (v == verdict_) return false;
  verdict_ = v;
  return true;
}

std::chrono::steady_clock::time_point HealthWatch::NextDue() const {
  auto due = std::chrono::steady_clock::time_point::max();
  if (gpus_) due = std::min(due, next_gpu_);
  if (!options_.check_command.empty()) due = std::min(due, next_check_);
  return due;
}

HealthThread::HealthThread(std::unique_ptr<HealthWatch> watch,
                           std::function<void(const HealthVerdict&)> report)
    : watch_(std::move(watch)), report_(std::move(report)) {
  thread_ = std::thread([this] { Run(); });
}

HealthThread::~HealthThread() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HealthThread::Run() {
  bool first = true;
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    const bool changed = watch_->Tick();
    if (changed || first) report_(watch_->verdict());
    first = false;
    lock.lock();
    const auto due = watch_->NextDue();
    if (due == std::chrono::steady_clock::time_point::max()) {
      cv_.wait(lock, [this] { return stop_; });  // nothing to watch: only the stop
    } else {
      cv_.wait_until(lock, due, [this] { return stop_; });
    }
  }
}

}  // namespace herd::agent
