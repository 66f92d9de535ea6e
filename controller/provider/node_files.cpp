#include "controller/provider/node_files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "controller/ssh/ssh_key.hpp"
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

Status EnsureNodeFiles(const std::string& dir, const std::string& name,
                       const std::string* public_key) {
  HERD_RETURN_IF_ERROR(MakeDir(dir, 0700));
  HERD_RETURN_IF_ERROR(MakeDir(dir + "/home", 0700));
  const std::string key = dir + "/ssh_host_ed25519_key";
  if (::access(key.c_str(), R_OK) != 0) {
    std::error_code ec;
    std::filesystem::remove(key + ".pub", ec);
    HERD_RETURN_IF_ERROR(
        MakeEd25519KeyPair(key, "herd-host-" + name).WithContext(name + ": making its host key"));
  }
  if (public_key != nullptr) {
    std::string k = *public_key;
    while (!k.empty() && (k.back() == '\n' || k.back() == '\r')) k.pop_back();
    return WriteIfChanged(dir + "/authorized_keys", k + "\n", 0600);
  }
  if (::access((dir + "/authorized_keys").c_str(), R_OK) != 0) {
    return FailedPrecondition(name + ": no authorized_keys in " + dir +
                              "; provision the cluster again");
  }
  return Status::Ok();
}

}  // namespace herd::controller::node_files
