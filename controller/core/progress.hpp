// Stage progress on the terminal: one updating spinner line on a TTY (unless NO_COLOR or TERM=dumb
// ask for plain output), plain lines otherwise, nothing with --quiet. Safe to call from the
// parallel fan-out threads.
#pragma once

#include <functional>
#include <mutex>
#include <string>

namespace herd::controller {

// Stage reports of long operations ("Provisioning 3 node(s)", "Agents 2/3 ready").
using ProgressFn = std::function<void(const std::string& stage, int done, int total)>;

class Progress {
 public:
  explicit Progress(bool quiet);
  ProgressFn Callback();
  // Ends an open spinner line.
  void Done();

 private:
  void Report(const std::string& stage, int done, int total);

  bool quiet_;
  bool live_;
  std::mutex mu_;
  std::string last_;
  int frame_ = 0;
  bool open_line_ = false;
};

}  // namespace herd::controller
