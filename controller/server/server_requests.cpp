// /api/v1/requests: the requests of mutating commands (newest first; all users' for admins), one
// request, its output (followed until it ends) and cancelling it. Another user's request is, for
// a user, one that does not exist.
#include <boost/json.hpp>
#include <cstdio>
#include <thread>

#include "controller/server/server_impl.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

namespace herd::server::detail {

using api_http::HttpError;
using api_http::Responder;
using api_http::Target;

namespace {

boost::json::object RequestJson(const RequestRecord& r) {
  boost::json::object o{{"id", r.id},
                        {"user", r.user},
                        {"verb", r.verb},
                        {"target", r.target},
                        {"state", std::string(RequestStateName(r.state))},
                        {"server", r.holder},
                        {"message", r.message},
                        {"cancel_requested", r.cancel_requested},
                        {"created_at_ms", r.created_at_ms},
                        {"started_at_ms", r.started_at_ms},
                        {"finished_at_ms", r.finished_at_ms}};
  if (r.exit_code) o["exit_code"] = *r.exit_code;
  return o;
}

}  // namespace

Result<RequestRecord> ServerImpl::OwnRequest(const User& user, const std::string& id) {
  HERD_RETURN_IF_ERROR(api_http::ValidateName("request", id));
  auto r = store_->GetRequest(id);
  // Another user's request is, for this one, a request that does not exist.
  if (!r.ok() || (r->user != user.name && user.role != Role::kAdmin)) {
    return NotFound("request " + id + " does not exist (see `herd api requests`)");
  }
  return r;
}

Result<boost::json::value> ServerImpl::GetRequest(const User& user, const std::string& id) {
  HERD_ASSIGN_OR_RETURN(auto r, OwnRequest(user, id));
  return boost::json::value(RequestJson(r));
}

void ServerImpl::ListRequests(const User& user, const Target& t,
                              const std::shared_ptr<Responder>& res) {
  const bool all = t.Query("all").value_or("") == "1";
  if (all) {
    if (auto s = RequireAdmin(user); !s.ok()) return res->Respond(HttpError(s));
  }
  int limit = 0;
  if (auto l = t.Query("limit")) {
    auto n = api_http::ParseId("limit", *l);
    if (!n.ok()) return res->Respond(HttpError(n.status()));
    limit = static_cast<int>(std::min<int64_t>(*n, 1 << 20));
  }
  auto list = store_->ListRequests(all ? "" : user.name, limit);
  if (!list.ok()) return res->Respond(HttpError(list.status()));
  boost::json::array arr;
  for (const auto& r : *list) arr.push_back(RequestJson(r));
  res->Respond(Json(arr));
}

void ServerImpl::RequestLog(const User& user, const std::string& id, bool follow,
                            const std::shared_ptr<Responder>& res) {
  auto r = OwnRequest(user, id);
  if (!r.ok()) return res->Respond(HttpError(r.status()));
  const std::string path = home_.RequestLog(id);
  res->StartStream(200, "application/octet-stream");
  uint64_t offset = 0;
  while (!res->Closed()) {
    // Read what is there, then whether it ended: a request that ended has all its output in.
    auto rec = store_->GetRequest(id);
    const bool ended = !rec.ok() || IsTerminal(rec->state);
    auto data = ReadFileFrom(path, offset);
    if (data.ok() && !data->empty()) {
      offset += data->size();
      res->Write(std::move(*data));
    }
    if (!follow || ended) break;
    std::this_thread::sleep_for(limits::kApiRequestLogPoll);
  }
  res->End();
}

Result<std::string> ServerImpl::ReadFileFrom(const std::string& path, uint64_t offset) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return std::string();
  std::string out;
  if (std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0) {
    char buf[64 * 1024];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && out.size() < limits::kApiMaxFrameBytes) {
      out.append(buf, n);
    }
  }
  std::fclose(f);
  return out;
}

Result<boost::json::value> ServerImpl::CancelRequest(const User& user, const std::string& id) {
  HERD_ASSIGN_OR_RETURN(auto r, OwnRequest(user, id));
  if (IsTerminal(r.state)) {
    return FailedPrecondition("request " + id + " already ended (" +
                              std::string(RequestStateName(r.state)) + ")");
  }
  HERD_RETURN_IF_ERROR(store_->RequestCancel(id));
  std::shared_ptr<RunningCommand> cmd;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = running_.find(id); it != running_.end()) cmd = it->second;
  }
  if (cmd) cmd->Cancel();
  Audit(user, "api.cancel", id, "ok");
  return boost::json::value(boost::json::object{{"id", id}, {"cancel_requested", true}});
}

}  // namespace herd::server::detail
