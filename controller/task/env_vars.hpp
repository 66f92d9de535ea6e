// Environment variables of a task: --env/--secret overrides, dotenv files and the ${VAR}
// substitution SkyPilot applies to file_mounts and workdir.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/common/status.hpp"

namespace herd::task {

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
using EnvPairs = std::vector<std::pair<std::string, std::string>>;

// A shell variable name: [A-Za-z_][A-Za-z0-9_]*.
bool IsEnvName(std::string_view name);

// One "--env K=V" or "--env K" (value taken from getenv); flag is "--env" or "--secret" and is
// named in errors.
Result<std::pair<std::string, std::string>> ParseEnvOverride(std::string_view text,
                                                             std::string_view flag,
                                                             const EnvLookup& getenv);

// A dotenv file as python-dotenv reads the common cases: KEY=VALUE lines, optional "export ",
// '#' comment lines and trailing " # comments" on unquoted values, values in '...' (literal) or
// "..." (with \n \" \\ escapes). Errors are "source:line: ...".
Result<EnvPairs> ParseEnvFileText(std::string_view text, std::string_view source);
Result<EnvPairs> ReadEnvFile(const std::string& path);

// Replaces ${NAME} and $NAME with lookup(NAME). A '$' not followed by a name stays as it is.
// An unset variable or an unterminated "${" is an error naming it.
Result<std::string> SubstituteVars(std::string_view text, const EnvLookup& lookup);

// The whole file; "cannot read PATH: reason" when it cannot be read. A file of more than
// max_bytes is refused before it is read (its size from fstat; a pipe is read up to the limit):
// "PATH: the file is N bytes; " + limit_text.
Result<std::string> ReadTextFile(const std::string& path, std::size_t max_bytes,
                                 std::string_view limit_text);
// The text of limit_text for a limit: "1048576 bytes (1 MiB)".
std::string BytesText(std::size_t bytes);

}  // namespace herd::task
