// herd gpus list [NAME[:COUNT]] [--infra aws[/REGION]] [--all-regions] (alias: herd show-gpus):
// the accelerators herd's catalogs offer, where, in what counts and at what price (SkyPilot's
// `sky gpus list`).
#include <ostream>

#include "controller/cli/common.hpp"
#include "controller/optimizer/optimizer.hpp"

namespace herd::cli {
namespace {

class GpusCommand final : public Command {
 public:
  CLI::App* Add(CLI::App& app) override {
    gpus_ = app.add_subcommand("gpus",
                               "accelerators: what exists where, in what counts, at what "
                               "price");
    gpus_->require_subcommand(1);
    list_ = gpus_->add_subcommand("list", "list accelerators (NAME or NAME:COUNT for details)");
    show_ = app.add_subcommand("show-gpus", "the same as `herd gpus list`");
    for (CLI::App* c : {list_, show_}) {
      c->add_option("accelerator", filter_, "NAME or NAME:COUNT (e.g. A100, H100:8)");
      c->add_option("--infra", infra_, "aws or aws/REGION");
      c->add_flag("--all-regions", all_regions_,
                  "every region's price (default: the cheapest region of each instance type)");
    }
    return gpus_;
  }
  bool Chosen() const override { return list_->parsed() || show_->parsed(); }
  int Run(CliContext& ctx) override {
    auto catalog = optimizer::LoadAwsCatalog();
    if (!catalog.ok()) return FailForStatus(ctx, catalog.status());
    auto offers = optimizer::ListGpus(*catalog, filter_, infra_, all_regions_);
    if (!offers.ok()) return FailForStatus(ctx, offers.status());
    if (offers->empty()) {
      ctx.err << "No accelerator matches " << (filter_.empty() ? "" : filter_ + " ")
              << (infra_.empty() ? std::string() : "in " + infra_ + " ") << "in " << catalog->source
              << ".\n";
      return 0;
    }
    bool detailed = !filter_.empty();
    if (!detailed) ctx.out << "COMMON GPU OFFERINGS (" << catalog->source << ")\n";
    ctx.out << optimizer::RenderGpus(*offers, detailed);
    if (!detailed) {
      ctx.out << "\nlocal and ssh/<pool> nodes report their own GPUs (`herd nodes CLUSTER`). "
                 "Details and prices: herd gpus list NAME[:COUNT]\n";
    }
    return 0;
  }

 private:
  CLI::App *gpus_ = nullptr, *list_ = nullptr, *show_ = nullptr;
  std::string filter_, infra_;
  bool all_regions_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeGpusCommand() { return std::make_unique<GpusCommand>(); }

}  // namespace herd::cli
