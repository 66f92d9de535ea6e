#include "controller/provider/node_files.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include "shared/common/file_util.hpp"

namespace herd::controller::node_files {

std::optional<std::string> ReadIfAny(const std::string& path) {
  auto r = herd::ReadFile(path);
  if (!r.ok()) return std::nullopt;
  return std::move(r).value();
}

std::string ReadProc(pid_t pid, const char* what) {
  auto s = ReadIfAny("/proc/" + std::to_string(pid) + "/" + what);
  return s ? *s : std::string();
}

std::string Tail(const std::string& path, size_t bytes) {
  auto content = ReadIfAny(path);
  if (!content || content->empty()) return "(empty)";
  std::string s = content->size() > bytes ? content->substr(content->size() - bytes) : *content;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

Status MakeDir(const std::string& path, mode_t mode) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return IoError("mkdir " + path + ": " + ec.message());
  if (::chmod(path.c_str(), mode) != 0) return ErrnoError("chmod " + path, errno);
  return Status::Ok();
}

Status WriteIfChanged(const std::string& path, const std::string& content, mode_t mode) {
  return herd::WriteFileIfChanged(path, content, mode).status();
}

}  // namespace herd::controller::node_files
