// How the API server streams a command's run to the CLI: a sequence of frames in the body of a
// chunked response, each "<tag> <length>\n<bytes>". Tags: 'R' the request's id (first, for
// mutating commands), 'O' bytes of the command's stdout, 'E' bytes of its stderr, 'X' its exit
// code in decimal (last). HTTP chunks do not align with frames: the decoder takes any pieces.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "shared/common/status.hpp"

namespace herd::server {

enum class FrameTag : char { kRequestId = 'R', kStdout = 'O', kStderr = 'E', kExit = 'X' };

std::string EncodeFrame(FrameTag tag, std::string_view payload);

// Feeds pieces of a frame stream; calls on_frame for each complete frame. A malformed header
// (unknown tag, no length, a length over limits::kApiMaxFrameBytes) is an InvalidArgument and the
// decoder stays failed.
class FrameDecoder {
 public:
  using FrameFn = std::function<void(FrameTag tag, std::string_view payload)>;
  explicit FrameDecoder(FrameFn on_frame) : on_frame_(std::move(on_frame)) {}
  Status Feed(std::string_view piece);
  // Bytes of an incomplete frame held (0 at a frame boundary).
  std::size_t pending() const { return buf_.size(); }

 private:
  FrameFn on_frame_;
  std::string buf_;
  Status failed_ = Status::Ok();
};

}  // namespace herd::server
