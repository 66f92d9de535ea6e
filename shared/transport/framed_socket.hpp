// A transport::Connection over a connected unix stream socket: the local hop between the herd CLI
// and its cluster's mux (controller/core/mux.hpp). Each message is a 4-byte big-endian length and
// then that many bytes (the same protobuf envelopes the websocket carries, one per message).
//
// Threading: callbacks run on the socket's executor, which must be run by one thread (its
// io_context on one thread, or a strand); Send and Close may be called from any thread.
#pragma once

#include <boost/asio/local/stream_protocol.hpp>
#include <memory>
#include <string>

#include "shared/common/status.hpp"
#include "shared/transport/transport.hpp"

namespace herd::transport {

// Bytes of the length prefix in front of each message.
inline constexpr std::size_t kFrameHeaderBytes = 4;

// Encodes one message as it goes on the socket (length prefix + bytes).
std::string EncodeLengthPrefixed(std::string_view message);

// Starts reading `socket` and returns its Connection. A message over limits::kMaxFrameBytes ends
// the connection with InvalidArgument; an end of the stream between messages is a clean close
// (OK), one inside a message is Unavailable. Close() flushes what was queued, then closes.
std::shared_ptr<Connection> StartFramed(boost::asio::local::stream_protocol::socket socket,
                                        Handlers handlers, std::string description);

// Blocking helpers for a socket not (yet) handed to StartFramed, each bounded by `timeout`
// (DeadlineExceeded after it): one message out, one message in.
Status WriteFrameSync(boost::asio::local::stream_protocol::socket& socket, std::string_view message,
                      std::chrono::milliseconds timeout);
Result<std::string> ReadFrameSync(boost::asio::local::stream_protocol::socket& socket,
                                  std::chrono::milliseconds timeout);

}  // namespace herd::transport
