// Turns each process's raw output into prefixed lines for the merged run.log on the head, with
// SkyPilot's prefixes ("(task, pid=N) ", "(head, rank=0, pid=N) ", ...).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace herd::agent {

// Which process a stream of output came from.
struct ProcessLabel {
  bool setup = false;
  int rank = 0;  // run: rank in the job; setup: rank in the cluster
  int pid = 0;
  std::string ip;     // the node's address; shown for workers (an empty one is left out)
  int num_nodes = 1;  // run: nodes of the job; setup: nodes of the cluster
};

// run, one node:          "(task, pid=N) "
// run, several, rank 0:   "(head, rank=0, pid=N) "
// run, several, rank K:   "(workerK, rank=K, pid=N, ip=A.B.C.D) "
// setup, first node or a one-node cluster: "(setup pid=N) "
// setup, other nodes:     "(setup pid=N, ip=A.B.C.D) "
std::string PrefixFor(const ProcessLabel& label);

// Splits one process's output into segments and puts the prefix in front of each. One per
// process; not thread-safe. Each byte is copied a bounded number of times (linear time).
//
// A segment ends at '\n', at "\r\n" (one line end, even when split across Feed calls), or at a
// '\r' not followed by '\n' (a progress bar redraw: "10%\r20%\r" gives "P10%\rP20%\r", so every
// redraw is prefixed, SkyPilot issue #981). Terminators are kept as they were. Bytes are bytes:
// invalid UTF-8 and NULs pass through. A segment longer than limits::kMaxLogLineBytes is cut
// there with a '\n' added, so a process that never prints a newline cannot exhaust memory.
class LinePrefixer {
 public:
  explicit LinePrefixer(std::string prefix);

  // Appends to out every segment completed by the bytes fed so far. A trailing '\r' is held back
  // until the next byte shows whether it is part of "\r\n".
  void Feed(std::string_view data, std::string& out);
  // At process exit: emits what is held back, with the prefix, and ends it with '\n' if it did
  // not end with one (a trailing "50%\r" becomes "P50%\r\n"), so that the next writer of the
  // merged log starts on a fresh line. The prefixer can be reused afterwards.
  void Flush(std::string& out);
  // Bytes fed but not yet emitted.
  std::size_t pending_bytes() const;

  const std::string& prefix() const { return prefix_; }

 private:
  void Emit(std::string_view terminator, std::string& out);
  void AppendContent(std::string_view content, std::string& out);

  std::string prefix_;
  std::string pending_;      // the current segment, without its terminator
  bool pending_cr_ = false;  // the current segment ended with '\r'; is a '\n' next?
};

}  // namespace herd::agent
