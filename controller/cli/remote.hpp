// The CLI's side of the API server: a command sent to the server (which runs it as this user and
// streams its output back in frames, controller/server/stream_frames.hpp), with the local files it
// needs uploaded: the task (as its stored JSON form, controller/jobs/task_codec.hpp), its workdir
// and file mounts (tar archives), its secrets (in the request body, over TLS, never in a file).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "controller/cli/command.hpp"
#include "controller/server/http/http_client.hpp"
#include "controller/state/api_config.hpp"
#include "controller/task/task.hpp"

namespace herd::cli {

struct RemoteCall {
  std::vector<std::string> args;     // the verb and its arguments, as the server's herd gets them
  std::string cluster;               // the cluster it acts on ("" for none)
  const task::Task* task = nullptr;  // sent as task.json; `--task-json task.json` is added
};

Result<std::unique_ptr<api_http::ApiClient>> ConnectApi(const controller::ApiConfig& api);

// Runs the call on the server; prints its output as it comes; returns its exit code (or the exit
// code of the error that kept it from running: 2 for a refused token or bad input).
int RunRemote(CliContext& ctx, const controller::ApiConfig& api, const RemoteCall& call);

// An error answer of the server: prints "herd: MESSAGE" and returns its exit code (2 for 400 and
// 401, 102 for 404, 1 otherwise).
int FailForResponse(CliContext& ctx, const api_http::ClientResponse& response);
// An error that kept the exchange from happening (cannot connect, certificate refused).
int FailForApiError(CliContext& ctx, const controller::ApiConfig& api, const Status& s);

}  // namespace herd::cli
