#include "shared/proto/frame.hpp"

namespace herd::proto {

template <typename Envelope>
Result<Envelope> Decode(std::string_view frame) {
  if (frame.size() > limits::kMaxFrameBytes) {
    return InvalidArgument("frame of " + std::to_string(frame.size()) + " bytes exceeds the " +
                           std::to_string(limits::kMaxFrameBytes) + "-byte limit");
  }
  Envelope msg;
  if (!msg.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    return InvalidArgument("malformed " + Envelope::descriptor()->name() + " frame of " +
                           std::to_string(frame.size()) + " bytes");
  }
  if (msg.version() != herd::v1::PROTOCOL_VERSION_1) {
    return InvalidArgument(Envelope::descriptor()->name() + " frame has protocol version " +
                           std::to_string(msg.version()) + ", want 1");
  }
  if (msg.msg_case() == 0) {
    return InvalidArgument(Envelope::descriptor()->name() + " frame carries no message");
  }
  return msg;
}

template Result<herd::v1::AgentToHead> Decode(std::string_view);
template Result<herd::v1::HeadToAgent> Decode(std::string_view);
template Result<herd::v1::ClientToHead> Decode(std::string_view);
template Result<herd::v1::HeadToClient> Decode(std::string_view);

}  // namespace herd::proto
