#include "controller/cli/remote.hpp"

#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <ostream>

#include "controller/cli/common.hpp"
#include "controller/jobs/task_codec.hpp"
#include "controller/server/stream_frames.hpp"
#include "controller/ssh/subprocess.hpp"
#include "shared/common/limits.hpp"

namespace herd::cli {

namespace fs = std::filesystem;
using controller::ApiConfig;

namespace {

// A tar archive of `dir`'s contents (or of the one file `file` in `dir`).
Result<std::string> Tar(const std::string& dir, const std::string& member) {
  HERD_ASSIGN_OR_RETURN(auto r, controller::RunProcess({"tar", "-C", dir, "-cf", "-", member}, {},
                                                       limits::kApiClientTimeout));
  if (r.exit_code != 0) return IoError("tar " + dir + ": " + r.err);
  if (r.out.size() > limits::kApiMaxUploadBytes) {
    return InvalidArgument(dir + " is " + std::to_string(r.out.size() >> 20) +
                           " MiB as an archive; the server takes at most " +
                           std::to_string(limits::kApiMaxUploadBytes >> 20) + " MiB per upload");
  }
  return std::move(r.out);
}

Result<std::string> Upload(api_http::ApiClient& client, const std::string& archive) {
  HERD_ASSIGN_OR_RETURN(auto r, client.Request("POST", "/api/v1/uploads", archive));
  HERD_RETURN_IF_ERROR(r.ToStatus());
  try {
    return std::string(boost::json::parse(r.body).as_object().at("id").as_string());
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("the server's answer to an upload: ") + e.what());
  }
}

// Uploads the task's workdir and file mounts and points the task at where the server puts them
// (relative to the directory the command runs in).
Status UploadFiles(api_http::ApiClient& client, task::Task& t, boost::json::object& uploads) {
  if (!t.workdir.empty()) {
    if (!fs::is_directory(t.workdir)) {
      return InvalidArgument("workdir: " + t.workdir + " is not a directory");
    }
    HERD_ASSIGN_OR_RETURN(std::string tar, Tar(fs::absolute(t.workdir).string(), "."));
    HERD_ASSIGN_OR_RETURN(uploads["workdir"], Upload(client, tar));
    t.workdir = "workdir";
  }
  int i = 0;
  for (auto& [remote, local] : t.file_mounts) {
    if (!fs::exists(local)) {
      return InvalidArgument("file_mounts." + remote + ": " + local + " does not exist");
    }
    const fs::path path = fs::absolute(local).lexically_normal();
    const std::string place = "mounts/" + std::to_string(i++);
    std::string tar;
    if (fs::is_directory(path)) {
      HERD_ASSIGN_OR_RETURN(tar, Tar(path.string(), "."));
      local = place;
    } else {
      HERD_ASSIGN_OR_RETURN(tar, Tar(path.parent_path().string(), path.filename().string()));
      local = place + "/" + path.filename().string();
    }
    HERD_ASSIGN_OR_RETURN(uploads[place], Upload(client, tar));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<api_http::ApiClient>> ConnectApi(const ApiConfig& api) {
  return api_http::ApiClient::Create({api.endpoint, api.ca_cert, api.token});
}

int FailForResponse(CliContext& ctx, const api_http::ClientResponse& response) {
  Status s = response.ToStatus();
  if (response.status == 401) return Fail(ctx, s, 2);
  return FailForStatus(ctx, s);
}

int FailForApiError(CliContext& ctx, const ApiConfig& api, const Status& s) {
  return Fail(ctx, Status(s.code(), "API server " + api.endpoint + ": " + s.message()),
              s.code() == Code::kInvalidArgument ? 2 : 1);
}

int RunRemote(CliContext& ctx, const ApiConfig& api, const RemoteCall& call) {
  auto client = ConnectApi(api);
  if (!client.ok()) return FailForApiError(ctx, api, client.status());
  boost::json::object body;
  boost::json::array args;
  for (const auto& a : call.args) args.push_back(boost::json::string(a));
  if (!call.cluster.empty()) body["cluster"] = call.cluster;
  if (call.task != nullptr) {
    task::Task t = *call.task;
    boost::json::object uploads, secrets;
    if (auto s = UploadFiles(**client, t, uploads); !s.ok()) {
      return s.code() == Code::kInvalidArgument ? Fail(ctx, s, 2) : FailForApiError(ctx, api, s);
    }
    for (const auto& [k, v] : t.secrets) secrets[k] = v;
    body["task"] = jobs::EncodeTask(t);
    if (!uploads.empty()) body["uploads"] = std::move(uploads);
    if (!secrets.empty()) body["secrets"] = std::move(secrets);
    args.push_back("--task-json");
    args.push_back("task.json");
  }
  body["args"] = std::move(args);
  if (ctx.async) {
    body["async"] = true;
    auto r = (*client)->Request("POST", "/api/v1/run", boost::json::serialize(body));
    if (!r.ok()) return FailForApiError(ctx, api, r.status());
    if (!r->ok()) return FailForResponse(ctx, *r);
    try {
      const std::string id(boost::json::parse(r->body).as_object().at("request_id").as_string());
      ctx.out << id << "\n";
      ctx.err << "Request submitted: " << id << ". Follow it with: herd api logs " << id << "\n";
    } catch (const std::exception& e) {
      return Fail(ctx, InvalidArgument(std::string("the server's answer: ") + e.what()));
    }
    return 0;
  }
  InstallSigint();
  int exit_code = -1;
  server::FrameDecoder decoder([&](server::FrameTag tag, std::string_view payload) {
    switch (tag) {
      case server::FrameTag::kStdout:
        std::fwrite(payload.data(), 1, payload.size(), stdout);
        std::fflush(stdout);
        break;
      case server::FrameTag::kStderr:
        std::fwrite(payload.data(), 1, payload.size(), stderr);
        std::fflush(stderr);
        break;
      case server::FrameTag::kExit:
        exit_code = std::atoi(std::string(payload).c_str());
        break;
      case server::FrameTag::kRequestId:
        break;
    }
  });
  Status bad = Status::Ok();
  auto r = (*client)->Stream("POST", "/api/v1/run", boost::json::serialize(body),
                             [&](std::string_view chunk) {
                               bad = decoder.Feed(chunk);
                               return bad.ok() && !Interrupted();
                             });
  if (!r.ok()) return FailForApiError(ctx, api, r.status());
  if (!r->ok()) return FailForResponse(ctx, *r);
  if (!bad.ok()) return Fail(ctx, bad.WithContext("the server's stream"));
  if (Interrupted()) {
    // The server interrupts the command as Ctrl-C would have here: a followed job keeps running.
    ctx.err << "\nDetached; the command was interrupted on the server (a job keeps running)."
            << (call.cluster.empty() ? "" : " Reattach with: herd logs " + call.cluster) << "\n";
    return controller::kExitNotFinished;
  }
  if (exit_code < 0) {
    return Fail(ctx, Unavailable("the server ended the stream before the command's exit code "
                                 "(it stopped or restarted; see `herd api requests`)"));
  }
  return exit_code;
}

int Command::RunRemote(CliContext& ctx, const ApiConfig& api,
                       const std::vector<std::string>& args) {
  return cli::RunRemote(ctx, api, RemoteCall{args, Cluster(), nullptr});
}

}  // namespace herd::cli
