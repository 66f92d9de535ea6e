#include "shared/proto/frame.hpp"

#include <google/protobuf/stubs/logging.h>

#include "shared/common/log.hpp"

namespace herd::proto {
namespace {

// protobuf reports some parse failures (a string field that is not UTF-8) on stderr itself, one
// line per frame: a misbehaving peer could fill an agent's journal with them. While a frame is
// being parsed on this thread, protobuf's message goes into the Decode error instead; anything
// protobuf logs elsewhere goes through herd's logger.
thread_local std::string* parse_notes = nullptr;

void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  if (parse_notes != nullptr && level < google::protobuf::LOGLEVEL_FATAL) {
    if (parse_notes->empty()) *parse_notes = message;  // the first reason is the useful one
    return;
  }
  HERD_LOG(kWarn) << "protobuf " << file << ":" << line << ": " << message;
}

// SetLogHandler is not thread-safe: install it once, before the first parse (static init).
void InstallLogHandlerOnce() {
  static const bool installed = (google::protobuf::SetLogHandler(&ProtobufLog), true);
  (void)installed;
}

// "AgentToHead" of herd.v1.AgentToHead (the lite runtime has no descriptors, only the full name).
template <typename Envelope>
std::string ShortName() {
  const std::string full = Envelope::default_instance().GetTypeName();
  return full.substr(full.rfind('.') + 1);
}

}  // namespace

template <typename Envelope>
Result<Envelope> Decode(std::string_view frame) {
  if (frame.size() > limits::kMaxFrameBytes) {
    return InvalidArgument("frame of " + std::to_string(frame.size()) + " bytes exceeds the " +
                           std::to_string(limits::kMaxFrameBytes) + "-byte limit");
  }
  InstallLogHandlerOnce();
  Envelope msg;
  std::string notes;
  parse_notes = &notes;
  bool parsed = msg.ParseFromArray(frame.data(), static_cast<int>(frame.size()));
  parse_notes = nullptr;
  if (!parsed) {
    return InvalidArgument("malformed " + ShortName<Envelope>() + " frame of " +
                           std::to_string(frame.size()) + " bytes" +
                           (notes.empty() ? std::string() : ": " + notes));
  }
  if (msg.version() != herd::v1::PROTOCOL_VERSION_1) {
    return InvalidArgument(ShortName<Envelope>() + " frame has protocol version " +
                           std::to_string(msg.version()) + ", want 1");
  }
  if (msg.msg_case() == 0) {
    return InvalidArgument(ShortName<Envelope>() + " frame carries no message");
  }
  return msg;
}

template Result<herd::v1::AgentToHead> Decode(std::string_view);
template Result<herd::v1::HeadToAgent> Decode(std::string_view);
template Result<herd::v1::ClientToHead> Decode(std::string_view);
template Result<herd::v1::HeadToClient> Decode(std::string_view);

}  // namespace herd::proto
