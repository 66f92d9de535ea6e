// herd-api: the team API server (api_server.hpp). `herd api start` runs it; a systemd unit
// (packaging/herd-api.service) may too. A binary of its own, so that the database clients it
// links (libpq) never load in every `herd` command.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "controller/server/api_server.hpp"
#include "shared/common/limits.hpp"
#include "shared/common/log.hpp"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  herd::server::ApiServerOptions o;
  CLI::App app{"herd-api: the herd team API server"};
  app.set_version_flag("--version", HERD_VERSION, "print the version and exit");
  app.add_option("--home", o.home, "the server's home")->required();
  app.add_option("--state-dir", o.state_dir,
                 "state shared by every server of one database: users' homes, requests, uploads, "
                 "the secrets key (default: the home; a shared filesystem for several servers)");
  app.add_option("--host", o.host, "address to listen on");
  app.add_option("--port", o.port, "port to listen on (0: any)");
  app.add_option("--db", o.db_url, "sqlite:PATH or postgresql://USER@HOST:PORT/DB");
  app.add_option("--cert", o.cert_file, "TLS certificate (default: the server's own CA's)");
  app.add_option("--key", o.key_file, "TLS key of --cert");
  app.add_flag("--plain-http", o.plain_http, "no TLS (loopback addresses only)");
  app.add_option("--herd", o.herd_binary, "the herd binary that runs users' commands");
  app.add_option("--warm-workers", o.warm_workers_per_user,
                 "warm workers per user for read commands (0: none)")
      ->check(CLI::Range(std::size_t{0}, herd::limits::kApiWarmWorkersMax));
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "debug log");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  herd::log::SetLevel(verbose ? herd::log::Level::kDebug : herd::log::Level::kInfo);
  if (o.herd_binary.empty()) {
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    // Installed: beside herd. Build tree: controller/server/herd-api and controller/herd.
    for (const fs::path& p :
         {self.parent_path() / "herd", self.parent_path().parent_path() / "herd"}) {
      if (fs::exists(p)) {
        o.herd_binary = p.string();
        break;
      }
    }
    if (o.herd_binary.empty()) {
      std::cerr << "herd-api: cannot find the herd binary next to " << self << "; give --herd\n";
      return 2;
    }
  }
  if ((o.cert_file.empty()) != (o.key_file.empty())) {
    std::cerr << "herd-api: --cert and --key go together\n";
    return 2;
  }
  o.version = HERD_VERSION;
  return herd::server::RunApiServer(std::move(o));
}
