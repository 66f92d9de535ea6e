// HERD_TRACE=1: the controller prints, to stderr, when each stage of a command was reached, in
// milliseconds since the process started (kernel start time of this process, so the exec and the
// dynamic loader count) and since the previous stage:
//   herd trace:   12.3 ms (+  1.1) state db open
// Off (the default) it costs one getenv at the first mark. For finding where a command spends its
// time.
#pragma once

#include <string_view>

namespace herd::controller {

// Prints one trace line when HERD_TRACE is set to anything but "" or "0".
void TraceMark(std::string_view stage);

}  // namespace herd::controller
