#include "controller/state/herd_home.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "shared/common/log.hpp"

namespace herd::controller {

std::string UserHome() {
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') return home;
  if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return pw->pw_dir;
  }
  return "/";
}

std::string HerdHome() {
  std::string home;
  if (const char* env = std::getenv("HERD_HOME"); env != nullptr && env[0] != '\0') {
    // Absolute, because the path is written into ssh configs and handed to other processes that
    // may run in another directory.
    std::error_code ec;
    auto abs = std::filesystem::absolute(env, ec);
    home = ec ? std::string(env) : abs.lexically_normal().string();
    while (home.size() > 1 && home.back() == '/') home.pop_back();
  } else {
    home = UserHome() + "/.herd";
  }
  if (Status s = EnsureDir(home, 0700); !s.ok()) {
    HERD_LOG(kWarn) << "herd home " << home << ": " << s.message();
  }
  return home;
}

std::string ClusterDir(std::string_view cluster) {
  return HerdHome() + "/clusters/" + std::string(cluster);
}

std::string StateDbPath() { return HerdHome() + "/state.db"; }

Status ValidateClusterName(std::string_view name) {
  constexpr std::size_t kMaxLen = 40;
  auto fail = [&](std::string_view why) {
    return InvalidArgument("invalid cluster name '" + std::string(name) + "': " + std::string(why) +
                           "; a cluster name is 1 to 40 characters of a-z, 0-9 and '-', "
                           "starting with a letter");
  };
  if (name.empty()) return fail("it is empty");
  if (name.size() > kMaxLen) return fail("it has " + std::to_string(name.size()) + " characters");
  if (name[0] < 'a' || name[0] > 'z') return fail("it does not start with a lowercase letter");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) {
      const bool printable = c > ' ' && c < 127;
      return fail(printable ? std::string("it contains '") + c + "'"
                            : std::string("it contains a space or control character"));
    }
  }
  return Status::Ok();
}

Status EnsureDir(const std::string& path, unsigned mode) {
  if (path.empty()) return InvalidArgument("empty directory path");
  // Every command starts here: a directory that is there is seen with one stat, without the
  // mkdir per level that takes each parent's lock (a burst of commands queued on it).
  if (struct stat st{}; stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::Ok();
  // Walk down from the root so each missing level is made with `mode` (create_directories would
  // use the umask's default).
  std::string partial;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    const std::size_t next = path.find('/', pos + 1);
    partial = path.substr(0, next);
    pos = next;
    if (partial.empty() || partial == "/") continue;
    if (mkdir(partial.c_str(), mode) == 0) {
      // mkdir applies the umask; chmod makes the mode exact (0700 must not become 0755 or 0500).
      if (chmod(partial.c_str(), mode) != 0) return ErrnoError("chmod " + partial, errno);
      continue;
    }
    const int err = errno;
    struct stat st {};
    if (err == EEXIST && stat(partial.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    if (err == EEXIST) return IoError("mkdir " + partial + ": exists and is not a directory");
    return ErrnoError("mkdir " + partial, err);
  }
  return Status::Ok();
}

}  // namespace herd::controller
