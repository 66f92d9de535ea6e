#include "controller/server/stream_frames.hpp"

#include <charconv>

#include "shared/common/limits.hpp"

namespace herd::server {

std::string EncodeFrame(FrameTag tag, std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  out += static_cast<char>(tag);
  out += ' ';
  out += std::to_string(payload.size());
  out += '\n';
  out += payload;
  return out;
}

Status FrameDecoder::Feed(std::string_view piece) {
  HERD_RETURN_IF_ERROR(failed_);
  buf_.append(piece);
  std::size_t at = 0;
  while (true) {
    const std::size_t nl = buf_.find('\n', at);
    if (nl == std::string::npos) {
      if (buf_.size() - at > 32) failed_ = InvalidArgument("stream frame: header too long");
      break;
    }
    const char tag = buf_[at];
    if (nl < at + 3 || buf_[at + 1] != ' ' ||
        (tag != 'R' && tag != 'O' && tag != 'E' && tag != 'X')) {
      failed_ = InvalidArgument("stream frame: malformed header");
      break;
    }
    std::size_t len = 0;
    auto [end, ec] = std::from_chars(buf_.data() + at + 2, buf_.data() + nl, len);
    if (ec != std::errc() || end != buf_.data() + nl || len > limits::kApiMaxFrameBytes) {
      failed_ = InvalidArgument("stream frame: bad length");
      break;
    }
    if (buf_.size() - (nl + 1) < len) break;  // the payload is not all here yet
    on_frame_(static_cast<FrameTag>(tag), std::string_view(buf_).substr(nl + 1, len));
    at = nl + 1 + len;
  }
  buf_.erase(0, at);
  return failed_;
}

}  // namespace herd::server
