// Fuzz target: the protocol frame decoder (shared/proto/frame). Every websocket message a head,
// agent or client receives goes through Decode first, so it must reject any byte string with a
// Status, never crash, and accept only what re-encodes to an envelope that decodes the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "shared/proto/frame.hpp"

namespace {

// Serialisation with map entries in key order. Plain SerializeAsString writes a map in its hash
// table's order, which can differ between two equal maps filled in different orders (the bench
// run found such a frame: two env entries came back swapped), so it cannot be compared as bytes.
template <typename Envelope>
std::string Canonical(const Envelope& msg) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!msg.SerializeToCodedStream(&coded)) std::abort();
  }
  return out;
}

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
  if (Canonical(*redecoded) != Canonical(*decoded)) std::abort();
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
