// transport::Connection fakes.
//   FakeHead: a client's connection to a head that the test drives: it records what the client
//     sends and can answer or close; handlers run on the io_context given, as a real
//     connection's do.
//   FakeConnection: a connection into the head from a peer of the given role and name (an
//     agent's proves node `name` of `cluster`, as its certificate would); it records what the
//     head sends until it is closed. Synchronous: nothing runs on an io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "shared/transport/transport.hpp"

namespace herd::testing {

class FakeHead : public transport::Connection {
 public:
  FakeHead(boost::asio::io_context& io, transport::Handlers h) : io_(io), handlers_(std::move(h)) {}
  void Send(std::string m) override {
    std::lock_guard<std::mutex> lock(mu_);
    sent_.push_back(std::move(m));
  }
  void Close() override { End(); }
  const transport::PeerIdentity& peer() const override { return peer_; }
  std::size_t queued_bytes() const override { return 0; }
  // The head sends m: on_message runs on the io.
  void Answer(std::string m, const std::shared_ptr<FakeHead>& self) {
    boost::asio::post(io_, [self, m = std::move(m)]() mutable {
      if (self->handlers_.on_message) self->handlers_.on_message(self, std::move(m));
    });
  }
  // The head closes the connection (once; later calls do nothing).
  void End() {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    // on_close runs on the io, once, as a real connection's does.
    boost::asio::post(io_, [self = self_.lock()] {
      if (!self) return;
      auto h = std::move(self->handlers_);
      if (h.on_close) h.on_close(self, Status::Ok());
    });
  }
  std::vector<std::string> sent() {
    std::lock_guard<std::mutex> lock(mu_);
    return sent_;
  }
  bool closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  // Set by the test to the shared_ptr that owns this connection (End passes it to on_close).
  std::weak_ptr<FakeHead> self_;

 private:
  boost::asio::io_context& io_;
  transport::Handlers handlers_;
  transport::PeerIdentity peer_;
  std::mutex mu_;
  std::vector<std::string> sent_;
  bool closed_ = false;
};

class FakeConnection : public transport::Connection {
 public:
  FakeConnection(transport::Role role, std::string name, std::string cluster) {
    peer_.role = role;
    if (role == transport::Role::kAgent) {
      peer_.node_cluster = std::move(cluster);
      peer_.node_name = name;
    }
    peer_.common_name = std::move(name);
    peer_.remote_address = "127.0.0.1";
  }
  void Send(std::string message) override {
    if (!closed_) sent.push_back(std::move(message));
  }
  void Close() override { closed_ = true; }
  const transport::PeerIdentity& peer() const override { return peer_; }
  std::size_t queued_bytes() const override { return 0; }
  bool closed() const { return closed_; }
  std::vector<std::string> sent;

 private:
  transport::PeerIdentity peer_;
  bool closed_ = false;
};

}  // namespace herd::testing
