#include "agent/process/step_program.hpp"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "shared/common/file_util.hpp"

namespace herd::agent {

namespace fs = std::filesystem;

Result<std::string> InstallStepProgram(const std::string& dir, const EmbeddedProgram& program) {
  if (program.bytes.empty() || program.sha256.size() < 16) {
    return FailedPrecondition("no supervisor program is embedded in this build");
  }
  const std::string name = "herd-step-" + std::string(program.sha256.substr(0, 16));
  std::error_code ec;
  // Absolute: the launcher starts it from wherever it runs.
  const std::string path = fs::absolute(fs::path(dir) / name, ec).lexically_normal().string();
  if (ec) return IoError("cannot resolve " + dir + ": " + ec.message());
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir + ": " + ec.message());
  auto wrote = WriteFileIfChanged(path, program.bytes, 0755, Durability::kProcessCrash);
  if (!wrote.ok()) return wrote.status().WithContext("cannot write the supervisor program");
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string other = it->path().filename().string();
    std::error_code ignored;
    if (other != name && other.rfind("herd-step-", 0) == 0) fs::remove(it->path(), ignored);
  }
  if (::access(path.c_str(), X_OK) != 0) {
    return ErrnoError(path + " cannot be executed", errno);
  }
  return path;
}

}  // namespace herd::agent
