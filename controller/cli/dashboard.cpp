// herd dashboard: a one-time login link to the web dashboard of the API server this CLI is logged
// in to (controller/server/dashboard/dashboard.hpp). The link carries a short-lived code, never
// the token; opening it gives the browser a session of its own.
#include <cstdlib>
#include <ostream>

#include <boost/json.hpp>

#include "controller/cli/common.hpp"
#include "controller/cli/remote.hpp"
#include "controller/ssh/subprocess.hpp"
#include "shared/common/limits.hpp"

namespace herd::cli {
namespace {

class DashboardCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("dashboard", "a login link to the API server's web dashboard");
    cmd_->add_option("--session-ttl", session_ttl_s_,
                     "the browser session's lifetime in seconds (default " +
                         std::to_string(limits::kDashboardSessionTtl.count() / 1000) + ")")
        ->check(CLI::Range(int64_t{1},
                           static_cast<int64_t>(limits::kDashboardSessionMaxTtl.count() / 1000)));
    cmd_->add_flag("--no-open", no_open_, "print the link only, do not open a browser");
    cmd_->add_option("-o,--output", output_, "output format")->check(CLI::IsMember({"json"}));
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  int Run(CliContext& ctx) override {
    auto api = ctx.Api();
    if (!api.ok()) return Fail(ctx, api.status(), 2);
    if (!*api) {
      return Fail(ctx,
                  FailedPrecondition("the dashboard is served by an API server: log in to one "
                                     "first (`herd api login -e URL --token TOKEN`)"),
                  2);
    }
    auto client = ConnectApi(**api);
    if (!client.ok()) return FailForApiError(ctx, **api, client.status());
    boost::json::object body;
    if (session_ttl_s_ > 0) body["session_ttl_s"] = session_ttl_s_;
    auto r =
        (*client)->Request("POST", "/api/v1/dashboard/login-code", boost::json::serialize(body));
    if (!r.ok()) return FailForApiError(ctx, **api, r.status());
    if (!r->ok()) return FailForResponse(ctx, *r);
    boost::system::error_code ec;
    auto v = boost::json::parse(r->body, ec);
    if (ec || !v.is_object() || !v.as_object().if_contains("path")) {
      return Fail(ctx, Internal("the server's answer is not a login code: " + r->body));
    }
    const auto& o = v.as_object();
    const std::string url = (*api)->endpoint + std::string(o.at("path").as_string());
    if (output_ == "json") {
      ctx.out << boost::json::serialize(
                     boost::json::object{{"url", url}, {"expires_at_ms", o.at("expires_at_ms")}})
              << "\n";
      return 0;
    }
    ctx.out << url << "\n";
    ctx.err
        << "Open this link within "
        << std::chrono::duration_cast<std::chrono::seconds>(limits::kDashboardLoginCodeTtl).count()
        << " s; it works once.\n";
    // A desktop session opens it; a terminal on a server just prints it.
    const bool desktop = std::getenv("DISPLAY") || std::getenv("WAYLAND_DISPLAY");
    if (!no_open_ && desktop) {
      if (auto pid = controller::SpawnDetached({"xdg-open", url}, "/dev/null"); !pid.ok()) {
        ctx.err << "(could not open a browser: " << pid.status().message() << ")\n";
      }
    }
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  int64_t session_ttl_s_ = 0;
  bool no_open_ = false;
  std::string output_;
};

}  // namespace

std::unique_ptr<Command> MakeDashboardCommand() { return std::make_unique<DashboardCommand>(); }

}  // namespace herd::cli
