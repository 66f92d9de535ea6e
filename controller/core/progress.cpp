#include "controller/core/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace herd::controller {

Progress::Progress(bool quiet) : quiet_(quiet) {
  const char* term = ::getenv("TERM");
  live_ = ::isatty(STDERR_FILENO) && ::getenv("NO_COLOR") == nullptr &&
          !(term && std::strcmp(term, "dumb") == 0);
}

ProgressFn Progress::Callback() {
  return [this](const std::string& stage, int done, int total) { Report(stage, done, total); };
}

void Progress::Report(const std::string& stage, int done, int total) {
  if (quiet_) return;
  std::lock_guard lock(mu_);
  std::string text = stage;
  if (total > 0) text += " (" + std::to_string(done) + "/" + std::to_string(total) + ")";
  if (text == last_) return;
  last_ = text;
  if (live_) {
    static const char* kFrames[] = {"|", "/", "-", "\\"};
    bool finished = total > 0 && done >= total;
    std::fprintf(stderr, "\r\033[K%s %s", finished ? "✓" : kFrames[frame_++ % 4], text.c_str());
    if (finished) {
      std::fputc('\n', stderr);
      open_line_ = false;
    } else {
      open_line_ = true;
    }
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

void Progress::Done() {
  std::lock_guard lock(mu_);
  if (open_line_) std::fputc('\n', stderr);
  open_line_ = false;
}

}  // namespace herd::controller
