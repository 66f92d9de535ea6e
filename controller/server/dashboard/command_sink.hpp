// The dashboard runs the CLI's commands (`status -o json`, `queue`, `logs`, `cancel`, ...) through
// the server's own command path, exactly as a remote CLI's POST /api/v1/run: the same permission
// checks, requests, audit entries and warm workers. A CommandSink is the Responder that path
// answers to in place of a connection: it decodes the frames (stream_frames.hpp) and calls back.
// It follows the browser's connection: when that closes (a page left, a log view closed), the
// command is interrupted as a CLI's Ctrl-C would.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controller/server/http/http_server.hpp"
#include "controller/server/stream_frames.hpp"
#include "shared/common/status.hpp"

namespace herd::server::dashboard {

class CommandSink final : public api_http::Responder,
                          public std::enable_shared_from_this<CommandSink> {
 public:
  struct Callbacks {
    // stdout ('O') and stderr ('E') bytes as they come. Returns false to stop the command (the
    // caller has what it wants): the command is interrupted and on_done still runs.
    std::function<bool(FrameTag tag, std::string_view bytes)> on_output;
    // Once: the command's exit code, or why it did not run (the server's refusal: NotFound for
    // another user's cluster, PermissionDenied, ...).
    std::function<void(Result<int> exit_code)> on_done;
  };
  // `browser`: the connection the answer goes to (nullptr: none to follow).
  static std::shared_ptr<CommandSink> Make(Callbacks callbacks,
                                           const std::shared_ptr<api_http::Responder>& browser);
  ~CommandSink() override;

  void Respond(api_http::HttpResponse response) override;
  void StartStream(int status, std::string content_type, api_http::Headers headers) override;
  bool Write(std::string chunk) override;
  void End() override;
  bool Closed() const override;
  void OnClose(std::function<void()> fn) override;
  std::size_t queued_bytes() const override { return 0; }

  // Interrupts the command (its OnClose callbacks run).
  void Stop();

 private:
  explicit CommandSink(Callbacks callbacks);
  void Finish(Result<int> result);

  Callbacks callbacks_;
  FrameDecoder decoder_;
  mutable std::mutex mu_;
  bool stopped_ = false, done_ = false;
  std::optional<int> exit_code_;
  std::vector<std::function<void()>> on_close_;
};

}  // namespace herd::server::dashboard
