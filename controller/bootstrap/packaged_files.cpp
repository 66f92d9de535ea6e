#include "controller/bootstrap/packaged_files.hpp"

#include <algorithm>
#include <chrono>

#include "shared/common/limits.hpp"

namespace herd::controller {
namespace {

void ReplaceAll(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

}  // namespace

Result<std::string> RenderUnit(std::string_view unit_template, const UnitPaths& paths) {
  // The unit file splits ExecStart= on blanks and unquotes; '%' starts a specifier.
  UnitPaths p = paths;
  for (std::string* v : {&p.herdlet_bin, &p.config, &p.workdir, &p.home}) {
    if (v->empty() || v->front() != '/') {
      return InvalidArgument("unit path '" + *v + "' is not absolute");
    }
    if (v->find_first_of(" \t\n\"'\\") != std::string::npos) {
      return InvalidArgument("unit path '" + *v + "' has a blank, quote or backslash");
    }
    ReplaceAll(*v, "%", "%%");
  }
  std::string out(unit_template);
  auto restart_sec =
      std::chrono::duration_cast<std::chrono::seconds>(limits::kAgentRestartBackoffInitial);
  ReplaceAll(out, "@HERDLET_BIN@", p.herdlet_bin);
  ReplaceAll(out, "@CONFIG@", p.config);
  ReplaceAll(out, "@WORKDIR@", p.workdir);
  ReplaceAll(out, "@HOME@", p.home);
  ReplaceAll(out, "@RESTART_SEC@", std::to_string(std::max<long>(1, restart_sec.count())));
  return out;
}

}  // namespace herd::controller
