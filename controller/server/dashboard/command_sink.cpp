#include "controller/server/dashboard/command_sink.hpp"

#include <charconv>

#include "controller/server/http/request_codec.hpp"

namespace herd::server::dashboard {

CommandSink::CommandSink(Callbacks callbacks)
    : callbacks_(std::move(callbacks)), decoder_([this](FrameTag tag, std::string_view payload) {
        if (tag == FrameTag::kExit) {
          int code = 1;
          std::from_chars(payload.data(), payload.data() + payload.size(), code);
          exit_code_ = code;
        } else if ((tag == FrameTag::kStdout || tag == FrameTag::kStderr) && !Closed()) {
          if (!callbacks_.on_output(tag, payload)) Stop();
        }
      }) {}

std::shared_ptr<CommandSink> CommandSink::Make(
    Callbacks callbacks, const std::shared_ptr<api_http::Responder>& browser) {
  auto sink = std::shared_ptr<CommandSink>(new CommandSink(std::move(callbacks)));
  if (browser) {
    std::weak_ptr<CommandSink> weak = sink;
    browser->OnClose([weak] {
      if (auto s = weak.lock()) s->Stop();
    });
  }
  return sink;
}

CommandSink::~CommandSink() {
  Finish(Internal("the server dropped the command without an answer"));
}

void CommandSink::Respond(api_http::HttpResponse response) {
  if (response.status >= 200 && response.status < 300) return Finish(0);
  Finish(api_http::StatusFromResponse(response.status, response.body));
}

void CommandSink::StartStream(int status, std::string, api_http::Headers) {
  if (status != 200) Finish(Internal("the command's stream answered " + std::to_string(status)));
}

bool CommandSink::Write(std::string chunk) {
  if (auto s = decoder_.Feed(chunk); !s.ok()) Finish(s);
  return !Closed();
}

void CommandSink::End() {
  if (exit_code_) return Finish(*exit_code_);
  Finish(Internal("the command's stream ended without an exit code"));
}

bool CommandSink::Closed() const {
  std::lock_guard<std::mutex> l(mu_);
  return stopped_ || done_;
}

void CommandSink::OnClose(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!stopped_) {
      on_close_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void CommandSink::Stop() {
  std::vector<std::function<void()>> fns;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return;
    stopped_ = true;
    fns.swap(on_close_);
  }
  for (auto& fn : fns) fn();
}

void CommandSink::Finish(Result<int> result) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (done_) return;
    done_ = true;
  }
  if (callbacks_.on_done) callbacks_.on_done(std::move(result));
}

}  // namespace herd::server::dashboard
