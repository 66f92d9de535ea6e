#include "controller/provider/slurm_config.hpp"

#include "controller/ssh/ssh_command.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "shared/common/file_util.hpp"

namespace herd::controller {

namespace {

std::string HomeDir() {
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return h;
  return "/root";
}

std::string ExpandTilde(const std::string& path) {
  if (path == "~") return HomeDir();
  if (path.rfind("~/", 0) == 0) return HomeDir() + path.substr(1);
  return path;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits on blanks, honouring double quotes (ssh_config's quoting of values with spaces).
std::vector<std::string> Words(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false, any = false;
  for (char c : s) {
    if (c == '"') {
      quoted = !quoted;
      any = true;
    } else if (!quoted && std::isspace(static_cast<unsigned char>(c))) {
      if (any) out.push_back(cur);
      cur.clear();
      any = false;
    } else {
      cur += c;
      any = true;
    }
  }
  if (any) out.push_back(cur);
  return out;
}

struct Block {
  std::vector<std::string> patterns;
  std::vector<std::pair<std::string, std::string>> values;  // lowercased key, value
  std::string location;
};

bool Matches(const Block& b, const std::string& name) {
  bool any = false;
  for (const auto& p : b.patterns) {
    bool negated = !p.empty() && p[0] == '!';
    std::string pat = negated ? p.substr(1) : p;
    if (::fnmatch(pat.c_str(), name.c_str(), 0) == 0) {
      if (negated) return false;
      any = true;
    }
  }
  return any;
}

}  // namespace

std::string DefaultSlurmConfigFile() { return HomeDir() + "/.slurm/config"; }

Result<std::vector<SlurmClusterConfig>> ParseSlurmConfig(std::string_view text,
                                                         const std::string& file) {
  std::vector<Block> blocks;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = Trim(text.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    const std::string where = file + ":" + std::to_string(line_no);
    if (line.empty() || line[0] == '#') {
      if (end == text.size()) break;
      continue;
    }
    // "Key value" or "Key=value" (blanks around '=' allowed).
    std::size_t key_end = line.find_first_of(" \t=");
    std::string key = Lower(std::string(line.substr(0, key_end)));
    std::string_view rest =
        key_end == std::string_view::npos ? std::string_view() : line.substr(key_end);
    rest = Trim(rest);
    if (!rest.empty() && rest[0] == '=') rest = Trim(rest.substr(1));
    std::vector<std::string> words = Words(rest);
    if (key == "host") {
      if (words.empty()) return InvalidArgument(where + ": Host: expected a name");
      blocks.push_back({words, {}, where});
    } else if (key == "match") {
      return InvalidArgument(where + ": Match blocks are not supported; use Host blocks");
    } else {
      if (blocks.empty()) {
        return InvalidArgument(where + ": " + std::string(line.substr(0, key_end)) +
                               " comes before any Host line");
      }
      if (words.empty()) {
        return InvalidArgument(where + ": " + std::string(line.substr(0, key_end)) +
                               ": expected a value");
      }
      if (key == "port") {
        const std::string& v = words[0];
        bool digits = !v.empty() && v.size() <= 5 &&
                      std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits || std::stoi(v) < 1 || std::stoi(v) > 65535) {
          return InvalidArgument(where + ": Port: expected a number from 1 to 65535, got '" + v +
                                 "'");
        }
      }
      std::string value = words[0];
      for (std::size_t i = 1; i < words.size(); ++i) value += " " + words[i];
      blocks.back().values.emplace_back(key, value);
    }
    if (end == text.size()) break;
  }
  // ssh_config: for each key, the first value among the blocks that match `name` wins.
  auto values_for = [&](const std::string& name) {
    std::map<std::string, std::string> first;
    for (const auto& m : blocks) {
      if (!Matches(m, name)) continue;
      for (const auto& [k, v] : m.values) first.emplace(k, v);
    }
    return first;
  };
  auto named = [&](const std::string& name) {  // a Host line names it without a wildcard
    return std::any_of(blocks.begin(), blocks.end(), [&](const Block& b) {
      return std::find(b.patterns.begin(), b.patterns.end(), name) != b.patterns.end();
    });
  };
  std::vector<SlurmClusterConfig> out;
  std::set<std::string> jump_hosts;  // Host entries used as another's ProxyJump: not clusters
  // The hops of a ProxyJump value ("a" or "a,b,..."), first to last, appended to `hops`, as ssh
  // takes them: each hop takes HostName, User, Port and IdentityFile from the blocks that match
  // it (the form's own user and port win; without an IdentityFile of its own a hop uses the
  // cluster's key); the first hop is reached through its own ProxyJump when it has one (the later
  // ones through the hop before them). A Host line that names a hop makes it a bastion, not a
  // cluster. `visiting`: the hosts whose ProxyJump is being resolved, to refuse a loop.
  std::function<Status(const std::string&, const std::string&, std::set<std::string>&,
                       std::vector<SshJump>&)>
      resolve_jumps = [&](const std::string& value, const std::string& key,
                          std::set<std::string>& visiting, std::vector<SshJump>& hops) -> Status {
    std::vector<std::string> specs;
    for (std::size_t from = 0;;) {
      const std::size_t comma = value.find(',', from);
      specs.push_back(value.substr(from, comma == std::string::npos ? comma : comma - from));
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const std::string& spec = specs[i];
      HERD_ASSIGN_OR_RETURN(SshJump hop, ParseSshJump(spec, key));
      if (named(hop.host)) jump_hosts.insert(hop.host);
      std::map<std::string, std::string> j = values_for(hop.host);
      if (i == 0 && j.count("proxyjump") && Lower(j["proxyjump"]) != "none") {
        if (!visiting.insert(hop.host).second) {
          return InvalidArgument("jump host " + hop.host +
                                 " is reached through itself (a ProxyJump loop)");
        }
        if (Status s = resolve_jumps(j["proxyjump"], key, visiting, hops); !s.ok()) {
          return InvalidArgument("jump host " + hop.host + ": ProxyJump: " + s.message());
        }
        visiting.erase(hop.host);
      }
      const bool own_user = spec.find('@') != std::string::npos;
      const std::string hostport = spec.substr(spec.rfind('@') + 1);  // npos + 1 == 0
      const bool own_port = hostport.front() == '['
                                ? hostport.find("]:") != std::string::npos
                                : std::count(hostport.begin(), hostport.end(), ':') == 1;
      if (j.count("hostname")) hop.host = j["hostname"];
      if (!own_user && j.count("user")) hop.user = j["user"];
      if (!own_port && j.count("port")) hop.port = std::stoi(j["port"]);
      if (j.count("identityfile")) hop.identity_file = ExpandTilde(j["identityfile"]);
      hops.push_back(std::move(hop));
    }
    return Status::Ok();
  };
  for (const auto& b : blocks) {
    for (const auto& name : b.patterns) {
      if (name.find_first_of("*?!") != std::string::npos) continue;
      if (std::any_of(out.begin(), out.end(), [&](const auto& c) { return c.name == name; })) {
        continue;
      }
      std::map<std::string, std::string> first = values_for(name);
      SlurmClusterConfig c;
      c.name = name;
      c.location = b.location;
      c.hostname = first.count("hostname") ? first["hostname"] : name;
      if (first.count("user")) c.user = first["user"];
      if (first.count("port")) c.port = std::stoi(first["port"]);
      if (first.count("identityfile")) c.identity_file = ExpandTilde(first["identityfile"]);
      if (first.count("proxyjump") && Lower(first["proxyjump"]) != "none") {
        const std::string where = b.location + ": Host " + name + ": ProxyJump";
        std::vector<SshJump> hops;
        std::set<std::string> visiting = {name};
        if (Status s = resolve_jumps(first["proxyjump"], c.identity_file, visiting, hops);
            !s.ok()) {
          return InvalidArgument(where + ": " + s.message());
        }
        c.jump = std::move(hops.back());
        hops.pop_back();
        c.jump.before = std::move(hops);
      }
      out.push_back(std::move(c));
    }
  }
  std::erase_if(out, [&](const SlurmClusterConfig& c) { return jump_hosts.count(c.name) > 0; });
  return out;
}

Result<std::vector<SlurmClusterConfig>> LoadSlurmConfig(const std::string& file) {
  HERD_ASSIGN_OR_RETURN(auto text, ReadFileIfExists(file));
  if (!text) {
    return NotFound("no Slurm clusters: " + file +
                    " does not exist (list each cluster's login node there, in SSH-config "
                    "format: Host, HostName, User, IdentityFile)");
  }
  return ParseSlurmConfig(*text, file);
}

bool IsSlurmInfra(const std::string& infra) {
  return infra == "slurm" || infra.rfind("slurm/", 0) == 0;
}

Result<SlurmInfra> ParseSlurmInfra(const std::string& infra) {
  if (!IsSlurmInfra(infra)) return InvalidArgument("'" + infra + "' is not a Slurm infra");
  SlurmInfra out;
  if (infra == "slurm") return out;
  std::string rest = infra.substr(6);
  std::size_t slash = rest.find('/');
  out.cluster = rest.substr(0, slash);
  if (slash != std::string::npos) out.partition = rest.substr(slash + 1);
  if (out.cluster.empty() || (slash != std::string::npos && out.partition.empty()) ||
      out.partition.find('/') != std::string::npos) {
    return InvalidArgument("infra '" + infra + "': expected slurm[/CLUSTER[/PARTITION]]");
  }
  return out;
}

Result<SlurmClusterConfig> FindSlurmCluster(const std::vector<SlurmClusterConfig>& clusters,
                                            const std::string& wanted, const std::string& file) {
  if (clusters.empty()) return NotFound("no Slurm clusters in " + file + " (no Host line)");
  if (wanted.empty()) return clusters.front();
  std::string names;
  for (const auto& c : clusters) {
    if (c.name == wanted) return c;
    names += (names.empty() ? "" : ", ") + c.name;
  }
  return NotFound("no Slurm cluster " + wanted + " in " + file + " (clusters: " + names + ")");
}

}  // namespace herd::controller
