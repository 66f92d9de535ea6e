#include "agent/job/proc_tree.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace herd::agent {

bool ParseProcStat(const std::string& line, ProcStat& out) {
  // "PID (COMM) STATE PPID ..." where COMM may hold spaces and parentheses: it ends at the last
  // ')'.
  const auto open = line.find('(');
  const auto close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  out.pid = std::atoi(line.c_str());
  out.comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  std::vector<std::string> fields;  // fields[0] is the state (field 3 of stat)
  while (fields.size() < 15 && rest >> field) fields.push_back(field);
  if (fields.size() < 15 || out.pid <= 0) return false;
  out.ppid = std::atoi(fields[1].c_str());
  // utime, stime, cutime, cstime: fields 14-17 of stat, 11-14 here.
  out.cpu_ticks = 0;
  for (int i = 11; i <= 14; ++i) {
    const long long v = std::atoll(fields[static_cast<std::size_t>(i)].c_str());
    if (v > 0) out.cpu_ticks += static_cast<uint64_t>(v);
  }
  return true;
}

std::vector<ProcStat> ReadAllProcStats(const std::string& proc_root) {
  std::vector<ProcStat> all;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc_root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream in(entry.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    ProcStat s;
    if (ParseProcStat(line, s)) all.push_back(std::move(s));
  }
  return all;
}

std::vector<ProcStat> TreeOf(const std::vector<ProcStat>& all, int root) {
  std::multimap<int, const ProcStat*> children;
  const ProcStat* top = nullptr;
  for (const ProcStat& s : all) {
    children.emplace(s.ppid, &s);
    if (s.pid == root) top = &s;
  }
  if (!top) return {};
  std::vector<ProcStat> tree{*top};
  std::vector<int> todo{root};
  while (!todo.empty() && tree.size() <= all.size()) {
    const int pid = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(pid);
    for (auto it = lo; it != hi; ++it) {
      if (it->second->pid == root) continue;
      tree.push_back(*it->second);
      todo.push_back(it->second->pid);
    }
  }
  std::sort(tree.begin() + 1, tree.end(),
            [](const ProcStat& a, const ProcStat& b) { return a.pid < b.pid; });
  return tree;
}

uint64_t CpuTicks(const std::vector<ProcStat>& tree) {
  uint64_t sum = 0;
  for (const ProcStat& s : tree) sum += s.cpu_ticks;
  return sum;
}

}  // namespace herd::agent
