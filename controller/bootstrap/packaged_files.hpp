// The files from packaging/ that bootstrap installs on nodes, compiled into herd (so an installed
// `herd` needs nothing next to it), and the rendering of the unit templates.
#pragma once

#include <string>
#include <string_view>

#include "shared/common/status.hpp"

namespace herd::controller {

// packaging/herdlet-supervise, packaging/herdlet.service, packaging/herdlet-user.service.
std::string_view SuperviseScript();
std::string_view SystemUnitTemplate();
std::string_view UserUnitTemplate();

// Absolute paths on the node that fill the unit templates' @NAME@ placeholders.
struct UnitPaths {
  std::string herdlet_bin;  // @HERDLET_BIN@
  std::string config;       // @CONFIG@
  std::string workdir;      // @WORKDIR@ (relative paths in the config are relative to it)
  std::string home;         // @HOME@
};

// The template with every placeholder replaced (@RESTART_SEC@ from
// limits::kAgentRestartBackoffInitial; '%' escaped). InvalidArgument for a relative path or one
// with blanks, quotes or backslashes, which a unit cannot hold unquoted.
Result<std::string> RenderUnit(std::string_view unit_template, const UnitPaths& paths);

}  // namespace herd::controller
