// Encoding and decoding of protocol envelopes (one per websocket binary message).
#pragma once

#include <string>
#include <string_view>

#include "herd/v1/agent.pb.h"
#include "herd/v1/client.pb.h"
#include "shared/common/limits.hpp"
#include "shared/common/status.hpp"

namespace herd::proto {

// Serialises an envelope and stamps the protocol version.
template <typename Envelope>
std::string Encode(Envelope msg) {
  msg.set_version(herd::v1::PROTOCOL_VERSION_1);
  return msg.SerializeAsString();
}

// Parses one frame. Rejects frames over limits::kMaxFrameBytes, bytes that are not a valid
// envelope, envelopes of another protocol version, and envelopes with no message set.
template <typename Envelope>
Result<Envelope> Decode(std::string_view frame);

extern template Result<herd::v1::AgentToHead> Decode(std::string_view);
extern template Result<herd::v1::HeadToAgent> Decode(std::string_view);
extern template Result<herd::v1::ClientToHead> Decode(std::string_view);
extern template Result<herd::v1::HeadToClient> Decode(std::string_view);

}  // namespace herd::proto
