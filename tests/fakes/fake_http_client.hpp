// An HttpClient for the EC2 API: answers each POST by its Action from a script and records every
// call's form body; a GET (the caller's public address) answers 203.0.113.9.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "controller/provider/http_client.hpp"

namespace herd::testing {

class FakeHttp : public controller::HttpClient {
 public:
  // Per Action, the replies (status, body) in turn; the last one repeats.
  std::map<std::string, std::vector<std::pair<long, std::string>>> replies;
  std::vector<std::string> bodies;

  Result<controller::HttpResponse> Send(const controller::HttpRequest& req) override {
    if (req.method == "GET") return controller::HttpResponse{200, "203.0.113.9\n", ""};
    bodies.push_back(req.body);
    std::string action = req.body.substr(7, req.body.find('&') - 7);
    auto& queue = replies[action];
    if (queue.empty()) return controller::HttpResponse{500, "no scripted reply for " + action, ""};
    auto [status, body] = queue.front();
    if (queue.size() > 1) queue.erase(queue.begin());
    return controller::HttpResponse{status, body, ""};
  }
  // The Action of every call, in order.
  std::vector<std::string> Actions() const {
    std::vector<std::string> out;
    for (const auto& b : bodies) out.push_back(b.substr(7, b.find('&') - 7));
    return out;
  }
};

}  // namespace herd::testing
