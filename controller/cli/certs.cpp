// herd certs init|issue: a cluster CA and certificates made by hand (for heads run directly).
#include <ostream>

#include "controller/cli/common.hpp"
#include "shared/tls/certs.hpp"

namespace herd::cli {
namespace {

class CertsCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    cmd_ = app.add_subcommand("certs", "make a cluster CA and its certificates");
    cmd_->require_subcommand(1);
    init_ = cmd_->add_subcommand("init", "a new CA and a client certificate in DIR");
    init_->add_option("dir", dir_, "directory")->required();
    init_->add_option("--cluster", cluster_, "cluster name")->required();
    issue_ = cmd_->add_subcommand("issue", "an agent certificate signed by DIR's CA");
    issue_->add_option("dir", dir_, "directory holding ca.crt and ca.key")->required();
    issue_->add_option("--node", node_, "node name")->required();
    issue_->add_option("--ip", ips_, "node address (repeatable)")->allow_extra_args(false);
    issue_->add_option("--out", out_, "output directory")->required();
    issue_->add_option("--days", days_, "days the certificate is valid")
        ->check(CLI::Range(1, 36500));
    issue_
        ->add_option("--starts-in-days", starts_in_days_,
                     "days from now when it becomes valid (negative: in the past; default an "
                     "hour ago)")
        ->check(CLI::Range(-36500.0, 36500.0));
    return cmd_;
  }
  bool Chosen() const override { return cmd_->parsed(); }
  int Run(CliContext& ctx) override {
    if (init_->parsed()) {
      if (auto s = tls::InitClusterCerts(dir_, cluster_); !s.ok()) return Fail(ctx, s);
      ctx.out << "CA and client certificate written to " << dir_ << "\n";
      return 0;
    }
    long not_before = starts_in_days_ == 0 ? tls::IssueOptions{}.not_before_seconds
                                           : static_cast<long>(starts_in_days_ * 86400);
    if (auto s = tls::IssueAgentCerts(dir_, node_, ips_, out_, days_, not_before); !s.ok()) {
      return Fail(ctx, s);
    }
    ctx.out << "agent certificate for " << node_ << " written to " << out_ << "\n";
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  CLI::App* init_ = nullptr;
  CLI::App* issue_ = nullptr;
  std::string dir_, cluster_, node_, out_;
  std::vector<std::string> ips_;
  int days_ = tls::IssueOptions{}.valid_days;
  double starts_in_days_ = 0;
};

}  // namespace

std::unique_ptr<Command> MakeCertsCommand() { return std::make_unique<CertsCommand>(); }

}  // namespace herd::cli
