// Spot interruption notices. EC2 posts a spot instance's interruption on the instance's metadata
// service two minutes ahead (limits::kSpotNoticeLead): with an IMDSv2 session token (PUT
// /latest/api/token), GET /latest/meta-data/spot/instance-action answers 404 until one is
// scheduled, then {"action": "terminate", "time": "2026-12-05T22:40:00Z"}. A spot node's agent
// (agent config `spot_metadata`) polls it every limits::kSpotNoticePoll on a thread of its own
// (SpotNoticeThread) and tells the head (AgentToHead.spot_notice), which stops the node's jobs
// with SIGTERM and their grace before EC2 takes the node.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "shared/common/clock.hpp"
#include "shared/common/status.hpp"

namespace herd::agent {

struct SpotNotice {
  std::string action;        // "terminate", "stop", "hibernate"
  std::string time;          // as the service wrote it
  int64_t time_unix_ms = 0;  // parsed; 0 when the time is not ISO 8601 UTC
  bool operator==(const SpotNotice&) const = default;
};

// The body of instance-action: InvalidArgument when it is not a JSON object with a string
// "action" and a string "time".
Result<SpotNotice> ParseInstanceAction(const std::string& body);

// "2026-12-05T22:40:00Z" (optionally with fractional seconds) -> ms since the epoch; nullopt for
// anything else.
std::optional<int64_t> ParseIsoUtcMs(const std::string& text);

// One HTTP exchange with the metadata service: the seam under the poller (real: BeastMetadataHttp,
// tests: a fake).
struct MetadataReply {
  int status = 0;
  std::string body;
};
class MetadataHttp {
 public:
  virtual ~MetadataHttp() = default;
  // method "PUT" or "GET", path from the root ("/latest/api/token"); headers added to the request.
  virtual Result<MetadataReply> Send(const std::string& method, const std::string& path,
                                     const std::map<std::string, std::string>& headers) = 0;
};

// The real one: plain HTTP/1.1 with Boost.Beast to endpoint ("http://HOST[:PORT]", default port
// 80), one connection per exchange, bounded by limits::kSpotMetadataTimeout. InvalidArgument
// for an endpoint of another form.
Result<std::unique_ptr<MetadataHttp>> MakeBeastMetadataHttp(const std::string& endpoint);

// Asks the service once per Poll: takes an IMDSv2 token when it has none or it is due for renewal
// (limits::kSpotMetadataTokenRenew on the clock), and once more when the service refuses it (401).
class SpotNoticePoller {
 public:
  SpotNoticePoller(MetadataHttp& http, Clock& clock) : http_(http), clock_(clock) {}
  // nullopt: no interruption scheduled (404). An error for anything the service should not say
  // (another status, a body that is not a notice) or a service that does not answer.
  Result<std::optional<SpotNotice>> Poll();

 private:
  Status Token();
  MetadataHttp& http_;
  Clock& clock_;
  std::string token_;
  std::chrono::steady_clock::time_point token_at_{};
};

// Polls every limits::kSpotNoticePoll until stopped (the destructor) and calls on_notice once
// per distinct notice (from this thread); errors are logged once per distinct message.
class SpotNoticeThread {
 public:
  SpotNoticeThread(std::unique_ptr<MetadataHttp> http,
                   std::function<void(const SpotNotice&)> on_notice);
  ~SpotNoticeThread();

 private:
  void Run();
  std::unique_ptr<MetadataHttp> http_;
  std::function<void(const SpotNotice&)> on_notice_;
  SystemClock clock_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace herd::agent
