#include "agent/cloud/spot_notice.hpp"

#include <boost/json.hpp>

#include <cstdio>
#include <ctime>

#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::agent {

namespace {

constexpr char kTokenPath[] = "/latest/api/token";
constexpr char kActionPath[] = "/latest/meta-data/spot/instance-action";

}  // namespace

std::optional<int64_t> ParseIsoUtcMs(const std::string& text) {
  int y, mo, d, h, mi, s, n = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &n) != 6 ||
      n != 19) {
    return std::nullopt;
  }
  std::size_t i = 19;
  int64_t ms = 0;
  if (i < text.size() && text[i] == '.') {
    int64_t scale = 100;
    for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      ms += (text[i] - '0') * scale;
      scale /= 10;
    }
  }
  if (i + 1 != text.size() || text[i] != 'Z') return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<int64_t>(::timegm(&tm)) * 1000 + ms;
}

Result<SpotNotice> ParseInstanceAction(const std::string& body) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(body, ec);
  const boost::json::object* o = ec ? nullptr : v.if_object();
  const boost::json::value* action = o ? o->if_contains("action") : nullptr;
  const boost::json::value* time = o ? o->if_contains("time") : nullptr;
  if (!action || !action->is_string() || !time || !time->is_string()) {
    std::string shown = body.substr(0, 200);
    return InvalidArgument("instance-action is not {\"action\": ..., \"time\": ...}: " + shown);
  }
  SpotNotice n;
  n.action = std::string(action->as_string());
  n.time = std::string(time->as_string());
  n.time_unix_ms = ParseIsoUtcMs(n.time).value_or(0);
  return n;
}

Status SpotNoticePoller::Token() {
  const auto ttl = std::chrono::duration_cast<std::chrono::seconds>(limits::kSpotMetadataTokenTtl);
  HERD_ASSIGN_OR_RETURN(
      MetadataReply r,
      http_.Send("PUT", kTokenPath,
                 {{"X-aws-ec2-metadata-token-ttl-seconds", std::to_string(ttl.count())}}));
  if (r.status != 200 || r.body.empty()) {
    return Unavailable("the metadata service gave no token (HTTP " + std::to_string(r.status) +
                       ")");
  }
  token_ = r.body;
  token_at_ = clock_.Now();
  return Status::Ok();
}

Result<std::optional<SpotNotice>> SpotNoticePoller::Poll() {
  if (token_.empty() || clock_.Now() - token_at_ >= limits::kSpotMetadataTokenRenew) {
    HERD_RETURN_IF_ERROR(Token());
  }
  HERD_ASSIGN_OR_RETURN(MetadataReply r,
                        http_.Send("GET", kActionPath, {{"X-aws-ec2-metadata-token", token_}}));
  if (r.status == 401) {  // the token expired or the service restarted: one more, once
    HERD_RETURN_IF_ERROR(Token());
    HERD_ASSIGN_OR_RETURN(r,
                          http_.Send("GET", kActionPath, {{"X-aws-ec2-metadata-token", token_}}));
  }
  if (r.status == 404) return std::optional<SpotNotice>();
  if (r.status != 200) {
    return Unavailable("the metadata service answered HTTP " + std::to_string(r.status) + " for " +
                       kActionPath);
  }
  HERD_ASSIGN_OR_RETURN(SpotNotice n, ParseInstanceAction(r.body));
  return std::optional<SpotNotice>(std::move(n));
}

SpotNoticeThread::SpotNoticeThread(std::unique_ptr<MetadataHttp> http,
                                   std::function<void(const SpotNotice&)> on_notice)
    : http_(std::move(http)), on_notice_(std::move(on_notice)) {
  thread_ = std::thread([this] { Run(); });
}

SpotNoticeThread::~SpotNoticeThread() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SpotNoticeThread::Run() {
  SpotNoticePoller poller(*http_, clock_);
  std::optional<SpotNotice> told;
  std::string last_error;
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    auto got = poller.Poll();
    if (!got.ok()) {
      if (got.status().message() != last_error) {
        last_error = got.status().message();
        HERD_LOG(kWarn) << "spot interruption notices: " << last_error;
      }
    } else if (*got && *got != told) {
      told = **got;
      HERD_LOG(kWarn) << "spot interruption notice: " << told->action << " at " << told->time;
      on_notice_(*told);
    }
    lock.lock();
    cv_.wait_for(lock, limits::kSpotNoticePoll, [this] { return stop_; });
  }
}

}  // namespace herd::agent
