// Fuzz target: the protocol frame decoder (shared/proto/frame). Every websocket message a head,
// agent or client receives goes through Decode first, so it must reject any byte string with a
// Status, never crash, and accept only what re-encodes to an envelope that decodes the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "shared/proto/frame.hpp"

namespace {

template <typename Envelope>
void CheckOne(std::string_view frame) {
  auto decoded = herd::proto::Decode<Envelope>(frame);
  if (!decoded.ok()) {
    // A rejection says why; an empty message would leave the log line blank.
    if (decoded.status().message().empty()) std::abort();
    return;
  }
  // Accepted: a message is set, and it survives a round trip unchanged.
  if (decoded->msg_case() == 0) std::abort();
  std::string again = herd::proto::Encode(*decoded);
  auto redecoded = herd::proto::Decode<Envelope>(again);
  if (!redecoded.ok()) std::abort();
  if (redecoded->SerializeAsString() != decoded->SerializeAsString()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view frame(reinterpret_cast<const char*>(data), size);
  CheckOne<herd::v1::AgentToHead>(frame);
  CheckOne<herd::v1::HeadToAgent>(frame);
  CheckOne<herd::v1::ClientToHead>(frame);
  CheckOne<herd::v1::HeadToClient>(frame);
  return 0;
}
