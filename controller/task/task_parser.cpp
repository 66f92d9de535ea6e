// ParseTaskYaml: SkyPilot task YAML -> Task. yaml-cpp exceptions stop at this file's edge.
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <set>
#include <span>
#include <sstream>
#include <utility>

#include "controller/task/env_vars.hpp"
#include "controller/task/resource_values.hpp"
#include "controller/task/task.hpp"
#include "shared/common/limits.hpp"

namespace herd::task {
namespace {

// The code point of the valid UTF-8 sequence at text[i] and its length, or length 0 when it is
// not one (overlong forms, surrogates and code points past U+10FFFF included).
struct CodePoint {
  char32_t value = 0;
  std::size_t length = 0;
};
CodePoint DecodeUtf8(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char b = byte(i);
  if (b < 0x80) return {b, 1};
  std::size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
  if (len == 0 || b > 0xF4 || b == 0xC0 || b == 0xC1 || i + len > text.size()) return {};
  char32_t value = b & (0x7F >> len);
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return {};
    value = (value << 6) | (byte(i + k) & 0x3F);
  }
  unsigned char b1 = byte(i + 1);
  if ((b == 0xE0 && b1 < 0xA0) || (b == 0xED && b1 >= 0xA0) || (b == 0xF0 && b1 < 0x90) ||
      (b == 0xF4 && b1 >= 0x90)) {
    return {};
  }
  return {value, len};
}

// YAML 1.2's c-printable: what a YAML stream may contain. Tab, LF, CR and printable Unicode; no
// other C0 or C1 control character (NUL included), no DEL, no U+FFFE/U+FFFF.
bool YamlPrintable(char32_t c) {
  return c == 0x09 || c == 0x0A || c == 0x0D || (c >= 0x20 && c <= 0x7E) || c == 0x85 ||
         (c >= 0xA0 && c <= 0xD7FF) || (c >= 0xE000 && c <= 0xFFFD) ||
         (c >= 0x10000 && c <= 0x10FFFF);
}

// "file:LINE:COL: ..." for the first byte that is not UTF-8 or the first character YAML does not
// allow; OK for valid text. yaml-cpp accepts both, and then every printed form of the task
// (`herd check -o json`, the SDK's JSON) would carry them: found by tests/fuzz/task_fuzz.
Status CheckYamlText(std::string_view text, std::string_view source) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < text.size();) {
    CodePoint cp = DecodeUtf8(text, i);
    if (cp.length == 0 || !YamlPrintable(cp.value)) {
      char what[48];
      if (cp.length == 0) {
        std::snprintf(what, sizeof what, "not UTF-8 text (byte 0x%02X)",
                      static_cast<unsigned char>(text[i]));
      } else {
        std::snprintf(what, sizeof what, "control character U+%04X",
                      static_cast<unsigned>(cp.value));
      }
      return InvalidArgument(std::string(source) + ":" + std::to_string(line) + ":" +
                             std::to_string(col) + ": " + what +
                             "; a task file is UTF-8 text without control characters");
    }
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
    i += cp.length;
  }
  return Status::Ok();
}

// Fields of a task that herd acts on.
constexpr std::string_view kTaskFields[] = {
    "name", "workdir", "num_nodes", "resources", "envs", "secrets", "file_mounts", "setup", "run"};
// SkyPilot task fields that do not change what runs on the nodes of an existing cluster: herd
// accepts them (so the same YAML works with both) and notes that it ignores them.
constexpr std::string_view kIgnoredTaskFields[] = {"volumes", "event_callback", "inputs",
                                                   "outputs"};
// config: SkyPilot's per-task configuration overrides. herd acts on its own section, config.herd
// (run_limits.hpp); the other sections are accepted and noted.
constexpr std::string_view kHerdConfigFields[] = {"hang_timeout", "time_limit", "signal", "grace"};
// The fields of a pipeline's header document (SkyPilot's pipeline name, a job group's placement
// and execution).
constexpr std::string_view kHeaderFields[] = {"name", "placement", "execution"};
// SkyPilot task fields whose whole point herd does not provide: refused, so nobody believes they
// took effect.
struct Refused {
  std::string_view field;
  std::string_view why;
};
constexpr Refused kRefusedTaskFields[] = {
    {"service", "SkyServe services are not supported by herd: run the server as a job instead"},
    {"pool", "worker pools are not supported by herd: remove it"},
};

constexpr std::string_view kResourceFields[] = {
    "infra",        "cloud",   "region",       "zone",      "cpus",     "memory",
    "accelerators", "gpus",    "ports",        "disk_size", "use_spot", "instance_type",
    "any_of",       "ordered", "job_recovery", "image_id"};
// Resource fields that only matter for choosing or creating cloud VMs.
constexpr std::string_view kIgnoredResourceFields[] = {
    "spot_recovery", "disk_tier", "network_tier",     "labels",
    "autostop",      "priority",  "accelerator_args", "max_hourly_cost"};
// resources.job_recovery: SkyPilot's recovery strategies and the fields of its mapping form.
constexpr std::string_view kRecoveryStrategies[] = {"FAILOVER", "EAGER_NEXT_REGION", "NONE"};
constexpr std::string_view kJobRecoveryFields[] = {"strategy", "max_restarts_on_errors",
                                                   "recover_on_exit_codes"};
// secrets: given as a list, each item names a secret the team server keeps: "secrets:NAME".
constexpr std::string_view kSecretRefPrefix = "secrets:";

template <size_t N>
bool Contains(const std::string_view (&list)[N], std::string_view key) {
  return std::find(std::begin(list), std::end(list), key) != std::end(list);
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                            std::tolower(static_cast<unsigned char>(b[j - 1]))
                        ? 0
                        : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The known field closest to a misspelt one, if it is close enough to be what was meant.
std::optional<std::string_view> ClosestField(std::string_view key,
                                             const std::vector<std::string_view>& known) {
  size_t allowed = key.size() <= 4 ? 1 : key.size() <= 8 ? 2 : 3;
  std::optional<std::string_view> best;
  size_t best_distance = allowed + 1;
  for (std::string_view k : known) {
    size_t d = EditDistance(key, k);
    if (d < best_distance) {
      best = k;
      best_distance = d;
    }
  }
  return best;
}

std::string Join(const std::vector<std::string_view>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    default:
      return "nothing";
  }
}

// A scalar written without quotes or a string tag: only those can be numbers or booleans.
bool IsPlainScalar(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "?"; }

// YAML 1.1 booleans, as PyYAML (and so SkyPilot) reads them.
std::optional<bool> PlainBool(const YAML::Node& node) {
  if (!IsPlainScalar(node)) return std::nullopt;
  static const std::set<std::string> kTrue = {"true", "True", "TRUE", "yes", "Yes",
                                              "YES",  "on",   "On",   "ON"};
  static const std::set<std::string> kFalse = {"false", "False", "FALSE", "no", "No",
                                               "NO",    "off",   "Off",   "OFF"};
  if (kTrue.count(node.Scalar())) return true;
  if (kFalse.count(node.Scalar())) return false;
  return std::nullopt;
}

std::optional<std::string> DefaultGetenv(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// Python's str() of a float, which is what SkyPilot makes of an env value PyYAML read as one:
// the shortest digits that read back, fixed notation for decimal exponents -4..15 (with at least
// one digit after the point), else d.ddde+XX.
std::string PythonFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  if (ec != std::errc()) return FormatNumber(v);
  std::string sci(buf, end);  // "-1.2345e+02"
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  std::size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  int exponent = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<std::size_t>(exponent) + 1 >= digits.size()) {
      out =
          digits + std::string(static_cast<std::size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<std::size_t>(exponent) + 1) + "." +
            digits.substr(static_cast<std::size_t>(exponent) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    std::string exp = std::to_string(std::abs(exponent));
    out += std::string("e") + (exponent < 0 ? "-" : "+") + (exp.size() < 2 ? "0" : "") + exp;
  }
  return negative ? "-" + out : out;
}

// Scanners for PyYAML's (YAML 1.1) int and float forms, written out rather than as std::regex,
// whose matching recurses once per character of a value.
bool AllIn(std::string_view s, std::string_view chars) {
  return s.find_first_not_of(chars) == std::string_view::npos;
}
constexpr std::string_view kDigits = "0123456789_";
// (":" [0-5]?[0-9])*: the sexagesimal groups after a first part.
bool Base60Tail(std::string_view s) {
  while (!s.empty()) {
    if (s[0] != ':') return false;
    s.remove_prefix(1);
    std::size_t n = 0;
    while (n < s.size() && n < 2 && std::isdigit(static_cast<unsigned char>(s[n]))) ++n;
    if (n == 0 || (n == 2 && s[0] > '5')) return false;
    s.remove_prefix(n);
  }
  return true;
}
std::string_view WithoutSign(std::string_view s) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  return s;
}
// [-+]?(0b[01_]+ | 0x[0-9a-fA-F_]+ | 0[0-7_]+ | 0 | [1-9][0-9_]*(:[0-5]?[0-9])*)
bool IsYamlInt(std::string_view text) {
  std::string_view s = WithoutSign(text);
  if (s.empty()) return false;
  if (s == "0") return true;
  if (s.size() > 2 && s.substr(0, 2) == "0b") return AllIn(s.substr(2), "01_");
  if (s.size() > 2 && s.substr(0, 2) == "0x") {
    return AllIn(s.substr(2), "0123456789abcdefABCDEF_");
  }
  if (s[0] == '0') return AllIn(s.substr(1), "01234567_");
  if (s[0] < '1' || s[0] > '9') return false;
  std::size_t end = s.find(':');
  if (!AllIn(s.substr(0, end), kDigits)) return false;
  return end == std::string_view::npos || Base60Tail(s.substr(end));
}
// [-+]?([0-9][0-9_]*(:[0-5]?[0-9])*\.[0-9_]* | \.[0-9_]+)([eE][-+][0-9]+)?
// | [-+]?\.(inf|Inf|INF) | \.(nan|NaN|NAN)
bool IsYamlFloat(std::string_view text) {
  if (text == ".nan" || text == ".NaN" || text == ".NAN") return true;
  std::string_view s = WithoutSign(text);
  if (s == ".inf" || s == ".Inf" || s == ".INF") return true;
  std::size_t exp = s.find_first_of("eE");
  if (exp != std::string_view::npos) {
    std::string_view e = s.substr(exp + 1);
    if (e.size() < 2 || (e[0] != '-' && e[0] != '+') || !AllIn(e.substr(1), "0123456789")) {
      return false;
    }
    s = s.substr(0, exp);
  }
  std::size_t dot = s.find('.');
  if (dot == std::string_view::npos || !AllIn(s.substr(dot + 1), kDigits)) return false;
  std::string_view whole = s.substr(0, dot);
  if (whole.empty()) return dot + 1 < s.size();  // ".5", not "."
  if (!std::isdigit(static_cast<unsigned char>(whole[0]))) return false;
  std::size_t colon = whole.find(':');
  if (!AllIn(whole.substr(0, colon), kDigits)) return false;
  return colon == std::string_view::npos || Base60Tail(whole.substr(colon));
}

// The text SkyPilot gives an env or secret value: PyYAML (YAML 1.1) reads a plain scalar as a
// bool, an int or a float where it looks like one, and SkyPilot then takes str() of it: `true`
// -> "True", `0.10` -> "0.1", `010` -> "8", `0x1F` -> "31", `1_000` -> "1000". Quoted values,
// and everything else, stay as written.
std::string EnvValueText(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (!IsPlainScalar(node)) return text;
  if (auto b = PlainBool(node)) return *b ? "True" : "False";
  auto strip = [](std::string t) {
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    return t;
  };
  // Sexagesimal (YAML 1.1's 1:30 = 90): the parts before the last, each times 60.
  auto base60 = [](const std::string& t, double& value) {
    value = 0;
    std::size_t start = 0;
    while (true) {
      std::size_t colon = t.find(':', start);
      std::string part = t.substr(start, colon == std::string::npos ? colon : colon - start);
      if (colon == std::string::npos) {
        value = value * 60 + std::strtod(part.c_str(), nullptr);
        return;
      }
      value = value * 60 + std::strtod(part.c_str(), nullptr);
      start = colon + 1;
    }
  };
  std::string sign;
  if (IsYamlInt(text)) {
    std::string t = strip(text);
    if (t[0] == '-' || t[0] == '+') {
      if (t[0] == '-') sign = "-";
      t.erase(0, 1);
    }
    long long value = 0;
    std::from_chars_result r{};
    if (t.find(':') != std::string::npos) {
      double v = 0;
      base60(t, v);
      if (v >= 9e18) return text;
      value = static_cast<long long>(v);
      r.ec = std::errc();
    } else if (t.rfind("0b", 0) == 0) {
      r = std::from_chars(t.data() + 2, t.data() + t.size(), value, 2);
    } else if (t.rfind("0x", 0) == 0) {
      r = std::from_chars(t.data() + 2, t.data() + t.size(), value, 16);
    } else if (t.size() > 1 && t[0] == '0') {
      r = std::from_chars(t.data() + 1, t.data() + t.size(), value, 8);
    } else {
      r = std::from_chars(t.data(), t.data() + t.size(), value, 10);
    }
    if (r.ec != std::errc()) return text;  // past 64 bits: Python would print it in full
    return (value == 0 ? "" : sign) + std::to_string(value);
  }
  if (IsYamlFloat(text)) {
    std::string t = strip(text);
    if (t.find("inf") != std::string::npos || t.find("Inf") != std::string::npos ||
        t.find("INF") != std::string::npos) {
      return t[0] == '-' ? "-inf" : "inf";
    }
    if (t.find("nan") != std::string::npos || t.find("NaN") != std::string::npos ||
        t.find("NAN") != std::string::npos) {
      return "nan";
    }
    if (t.find(':') != std::string::npos) {
      bool negative = t[0] == '-';
      if (t[0] == '-' || t[0] == '+') t.erase(0, 1);
      double v = 0;
      base60(t, v);
      return PythonFloat(negative ? -v : v);
    }
    return PythonFloat(std::strtod(t.c_str(), nullptr));
  }
  return text;
}

// "~" and "~/..." as the local home, as SkyPilot's os.path.expanduser does for local paths.
std::string ExpandHome(const std::string& path, const EnvLookup& getenv) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  auto home = getenv("HOME");
  if (!home || home->empty()) return path;
  return *home + path.substr(1);
}

// "s3://bucket/x", "gs://...": a URI (scheme "://"), never a local path.
bool IsUri(std::string_view text) {
  std::size_t sep = text.find("://");
  if (sep == std::string_view::npos || sep == 0) return false;
  if (!std::isalpha(static_cast<unsigned char>(text[0]))) return false;
  for (char c : text.substr(0, sep)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

Status CheckBucketName(std::string_view name) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("'" + std::string(name) +
                           "' is not a valid S3 bucket name: " + std::string(why));
  };
  if (name.size() < 3 || name.size() > 63) return bad("use 3 to 63 characters");
  for (char c : name) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-')) {
      return bad("use lower-case letters, digits, '.' and '-' only");
    }
  }
  auto alnum = [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c));
  };
  if (!alnum(name.front()) || !alnum(name.back())) {
    return bad("start and end with a letter or digit");
  }
  if (name.find("..") != std::string_view::npos) return bad("no two dots in a row");
  int dots = 0;
  bool digits_and_dots = true;
  for (char c : name) {
    if (c == '.')
      ++dots;
    else if (!std::isdigit(static_cast<unsigned char>(c)))
      digits_and_dots = false;
  }
  if (digits_and_dots && dots == 3) return bad("it must not look like an IP address");
  if (name.rfind("xn--", 0) == 0 || name.rfind("sthree-", 0) == 0) {
    return bad("the prefixes xn-- and sthree- are reserved");
  }
  auto ends = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  if (ends("-s3alias") || ends("--ol-s3"))
    return bad("the suffixes -s3alias and --ol-s3 are reserved");
  return Status::Ok();
}

namespace {

std::string Child(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return std::string(path) + "." + std::string(key);
}

// The expanded size the event walk (TaskParser::CheckEvents) keeps for an anchor whose node is
// still being read: an alias to it is inside it.
constexpr std::size_t kAnchorOpen = SIZE_MAX;

// A variable marked required (null value) in the YAML, remembered until overrides are applied.
struct RequiredVar {
  std::string name;
  YAML::Mark mark;
};

struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
};

class TaskParser {
 public:
  TaskParser(std::string_view source, const ParseOptions& options)
      : source_(source),
        options_(options),
        getenv_(options.getenv ? options.getenv : DefaultGetenv) {}

  // Every document: an optional pipeline header, then the tasks. one_task: the caller takes a
  // single task, and a second one is refused at its first line.
  Result<Pipeline> Parse(std::string_view yaml, bool one_task) {
    std::vector<YAML::Node> docs;
    try {
      HERD_RETURN_IF_ERROR(CheckEvents(yaml));
      docs = YAML::LoadAll(std::string(yaml));
    } catch (const YAML::DeepRecursion& e) {  // CheckEvents refuses less deep nesting first
      return InvalidArgument(Where(e.mark) + TooDeep());
    } catch (const YAML::Exception& e) {
      return InvalidArgument(Where(e.mark) + "invalid YAML: " + e.msg);
    }
    std::vector<YAML::Node> tasks;
    for (const YAML::Node& doc : docs) {
      if (!doc.IsNull()) tasks.push_back(doc);
    }
    Pipeline pipeline;
    try {
      // Indexes, not erase: assigning a YAML::Node (as erase does) overwrites the node it
      // refers to.
      std::size_t first = 0;
      if (tasks.size() > 1 && IsHeader(tasks[0])) {
        HERD_RETURN_IF_ERROR(ParseHeader(tasks[0], pipeline));
        first = 1;
      }
      const std::size_t count = tasks.size() - first;
      if (one_task && count > 1) {
        return InvalidArgument(Where(tasks[first + 1].Mark()) + "a second task (YAML document): " +
                               "this command takes one task; `herd launch` runs a pipeline of " +
                               std::to_string(count) + " tasks one after another");
      }
      if (count == 0) {  // An empty file is a valid task that does nothing, as in SkyPilot.
        Task task;
        HERD_RETURN_IF_ERROR(ApplyOverrides(task, {}, {}, {}));
        pipeline.tasks.push_back(std::move(task));
      }
      for (std::size_t i = first; i < tasks.size(); ++i) {
        Task task;
        HERD_RETURN_IF_ERROR(ParseTask(tasks[i], task));
        pipeline.tasks.push_back(std::move(task));
      }
    } catch (const YAML::Exception& e) {
      return InvalidArgument(Where(e.mark) + "invalid YAML: " + e.msg);
    }
    for (const Task& task : pipeline.tasks) HERD_RETURN_IF_ERROR(CheckSpecSize(task, source_));
    return pipeline;
  }

 private:
  // yaml-cpp 0.7 (Debian 12) has a parser that, on some malformed streams (a stray ',' after a
  // block sequence, among others: jbeder/yaml-cpp#1040), reports a new empty document at the
  // same place forever; YAML::LoadAll then allocates until the machine runs out of memory (found
  // by tests/fuzz/task_fuzz). Walk the documents with the event parser first: a document that
  // starts where the previous one started means the parser is stuck there, which is a syntax
  // error at that place. The walk ends because every further document must start past the last.
  // The same walk sees every scalar as yaml-cpp decoded it, and refuses one that is not UTF-8.
  // It also bounds what the task expands to (limits::kMaxTaskExpandedBytes, kMaxTaskAliasUses)
  // and how deep it nests (kMaxTaskNestingDepth): it holds no node, only the size of each anchor
  // and of each collection still open, and stops at the event that crosses a limit.
  Status CheckEvents(std::string_view yaml) const {
    // Thrown by the walk's handler to stop yaml-cpp's parser at once.
    struct Refusal {
      YAML::Mark mark;
      std::string what;
    };
    struct Walk : YAML::EventHandler {
      YAML::Mark last;
      bool stuck = false;
      // The first scalar that is not UTF-8 after yaml-cpp decoded its escapes, and the bad byte.
      YAML::Mark bad_text = YAML::Mark::null_mark();
      unsigned char bad_byte = 0;
      // Expanded size: bytes of scalars plus one per node, aliases counted as what they name.
      std::size_t expanded = 0;
      std::size_t aliases = 0;
      // Each anchor's expanded size, by yaml-cpp's anchor id (1, 2, ... within a document);
      // kAnchorOpen while its node is still being read.
      std::vector<std::size_t> anchors;
      // The collections open around the current event, outermost first.
      struct Open {
        YAML::anchor_t anchor;
        std::size_t size;
      };
      std::vector<Open> open;

      void OnDocumentStart(const YAML::Mark& mark) override {
        stuck = stuck || (mark.pos == last.pos && mark.line == last.line);
        last = mark;
        anchors.clear();
        open.clear();
      }
      void OnDocumentEnd() override {}
      void Add(const YAML::Mark& mark, std::size_t size) {
        expanded += size;
        if (!open.empty()) open.back().size += size;
        if (expanded > limits::kMaxTaskExpandedBytes) {
          throw Refusal{mark, "the task expands to more than " +
                                  BytesText(limits::kMaxTaskExpandedBytes) +
                                  " here (scalars' bytes plus one per node, each alias counted "
                                  "as a copy of the node it names): repeat less"};
        }
      }
      void Anchor(YAML::anchor_t anchor, std::size_t size) {
        if (anchor == YAML::NullAnchor) return;
        if (anchors.size() <= anchor) anchors.resize(anchor + 1, 0);
        anchors[anchor] = size;
      }
      void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
        Add(mark, 1);
        Anchor(anchor, 1);
      }
      void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
        if (++aliases > limits::kMaxTaskAliasUses) {
          throw Refusal{mark, "more than " + std::to_string(limits::kMaxTaskAliasUses) +
                                  " aliases (*name) in one task file"};
        }
        std::size_t size = anchor < anchors.size() ? anchors[anchor] : 0;
        if (size == kAnchorOpen) {
          throw Refusal{mark,
                        "an alias inside the node it names (a node that contains "
                        "itself): a task cannot be recursive"};
        }
        Add(mark, size);
      }
      // yaml-cpp 0.7 decodes the escapes \N and \_ of a double-quoted string to the single bytes
      // 0x85 and 0xA0, not to UTF-8: the checked text then holds a value that is not text, and
      // its JSON form (`herd check -o json`) is not JSON (found by tests/fuzz/task_fuzz).
      void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                    const std::string& value) override {
        Add(mark, 1 + value.size());
        Anchor(anchor, 1 + value.size());
        if (!bad_text.is_null()) return;
        for (std::size_t i = 0; i < value.size();) {
          CodePoint cp = DecodeUtf8(value, i);
          if (cp.length == 0) {
            bad_text = mark;
            bad_byte = static_cast<unsigned char>(value[i]);
            return;
          }
          i += cp.length;
        }
      }
      void Start(const YAML::Mark& mark, YAML::anchor_t anchor) {
        if (open.size() >= static_cast<std::size_t>(limits::kMaxTaskNestingDepth)) {
          throw Refusal{mark, TooDeep()};
        }
        Add(mark, 1);
        Anchor(anchor, kAnchorOpen);
        open.push_back({anchor, 1});
      }
      void End() {
        if (open.empty()) return;
        Open done = open.back();
        open.pop_back();
        Anchor(done.anchor, done.size);
        if (!open.empty()) open.back().size += done.size;
      }
      void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                           YAML::EmitterStyle::value) override {
        Start(mark, anchor);
      }
      void OnSequenceEnd() override { End(); }
      void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                      YAML::EmitterStyle::value) override {
        Start(mark, anchor);
      }
      void OnMapEnd() override { End(); }
    } walk;
    walk.last = YAML::Mark::null_mark();
    std::istringstream in{std::string(yaml)};
    YAML::Parser parser(in);
    try {
      while (parser.HandleNextDocument(walk)) {
        if (walk.stuck) {
          return InvalidArgument(Where(walk.last) +
                                 "invalid YAML: cannot parse past this point (a stray ',' or "
                                 "another character that starts nothing here?)");
        }
        if (!walk.bad_text.is_null()) {
          char byte[8];
          std::snprintf(byte, sizeof byte, "0x%02X", walk.bad_byte);
          return InvalidArgument(Where(walk.bad_text) + "a string that is not UTF-8 once its " +
                                 "escapes are decoded (byte " + byte +
                                 "); for U+0085 or U+00A0 write \\u0085 or \\u00A0 (or the "
                                 "character itself), not \\N or \\_");
        }
      }
    } catch (const Refusal& r) {
      return InvalidArgument(Where(r.mark) + r.what);
    }
    return Status::Ok();
  }

  // A pipeline's first document when it holds nothing but header fields (SkyPilot: `name:` alone;
  // a job group adds placement and execution).
  static bool IsHeader(const YAML::Node& doc) {
    if (!doc.IsMap() || doc.size() == 0) return false;
    for (const auto& kv : doc) {
      if (!kv.first.IsScalar() || !Contains(kHeaderFields, kv.first.Scalar())) return false;
    }
    return true;
  }

  Status ParseHeader(const YAML::Node& doc, Pipeline& pipeline) const {
    HERD_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(doc, ""));
    for (const Entry& e : entries) {
      if (e.key == "name") {
        HERD_ASSIGN_OR_RETURN(pipeline.name, String(e.value, "name"));
        if (Status s = CheckNameSize(pipeline.name); !s.ok()) {
          return Error(e.value, "name", s.message());
        }
      } else if (e.key == "execution") {
        HERD_ASSIGN_OR_RETURN(std::string v, String(e.value, "execution"));
        std::string lower = v;
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (lower == "parallel") {
          return Error(e.value, "execution",
                       "herd runs a pipeline's tasks one after another, each after the previous "
                       "one succeeded; parallel job groups are not supported: remove it or "
                       "launch the tasks on separate clusters");
        }
        if (!lower.empty() && lower != "serial" && lower != "sequential") {
          return Error(e.value, "execution",
                       "expected serial (the tasks one after another), got " + Describe(e.value));
        }
        pipeline.execution = lower;
      } else {  // placement: every task of a herd pipeline runs on the one cluster
        Note(pipeline.notes, e.key_node, e.key,
             "accepted; herd runs every task of the pipeline on one cluster");
      }
    }
    return Status::Ok();
  }

  static std::string TooDeep() {
    return "the file nests lists and mappings more than " +
           std::to_string(limits::kMaxTaskNestingDepth) + " levels deep here";
  }

  std::string Where(const YAML::Mark& mark) const {
    if (mark.is_null() || mark.line < 0) return std::string(source_) + ": ";
    return std::string(source_) + ":" + std::to_string(mark.line + 1) + ":" +
           std::to_string(mark.column + 1) + ": ";
  }
  Status Error(const YAML::Node& at, std::string_view path, std::string_view what) const {
    std::string prefix = path.empty() ? "" : std::string(path) + ": ";
    return InvalidArgument(Where(at.Mark()) + prefix + std::string(what));
  }
  void Note(std::vector<std::string>& notes, const YAML::Node& at, std::string_view path,
            std::string_view what) const {
    notes.push_back(Where(at.Mark()) + std::string(path) + ": " + std::string(what));
  }

  // The entries of a mapping in file order; keys must be distinct scalars.
  Result<std::vector<Entry>> Entries(const YAML::Node& map, std::string_view path) const {
    std::vector<Entry> entries;
    std::map<std::string, YAML::Mark> seen;
    for (const auto& kv : map) {
      // Copies: yaml-cpp's iterator yields a temporary pair of node handles.
      const YAML::Node key = kv.first;
      const YAML::Node value = kv.second;
      if (!key.IsScalar()) {
        return Error(key, path, "a field name must be a plain word, got " + Describe(key));
      }
      auto [where, inserted] = seen.emplace(key.Scalar(), key.Mark());
      if (!inserted) {
        return Error(
            key, Child(path, key.Scalar()),
            "given twice (first on line " + std::to_string(where->second.line + 1) + "): keep one");
      }
      entries.push_back({key.Scalar(), key, value});
    }
    return entries;
  }

  Status UnknownField(const Entry& e, std::string_view path,
                      const std::vector<std::string_view>& known) const {
    std::string what = "unknown field '" + e.key + "'";
    if (auto close = ClosestField(e.key, known)) {
      what += " (did you mean '" + std::string(*close) + "'?)";
    } else {
      what += " (known fields: " + Join(known, ", ") + ")";
    }
    return Error(e.key_node, path, what);
  }

  // config: {herd: {hang_timeout: 10m, time_limit: 2h, signal: USR1@300, grace: 60}}. Returns
  // whether config holds anything else (SkyPilot's sections: accepted, not acted on).
  Result<bool> ParseConfig(const YAML::Node& config, Task& task) {
    if (!config.IsMap() || config.size() == 0) return true;
    HERD_ASSIGN_OR_RETURN(std::vector<Entry> sections, Entries(config, "config"));
    bool other_sections = false;
    for (const Entry& section : sections) {
      if (section.key != "herd") {
        other_sections = true;
        continue;
      }
      if (section.value.IsNull()) continue;
      if (!section.value.IsMap()) {
        return Error(section.value, "config.herd",
                     "expected a mapping (hang_timeout, time_limit, signal, grace), got " +
                         Describe(section.value));
      }
      HERD_ASSIGN_OR_RETURN(std::vector<Entry> fields, Entries(section.value, "config.herd"));
      RunLimits& l = task.run_limits;
      for (const Entry& f : fields) {
        const std::string path = "config.herd." + f.key;
        if (!Contains(kHerdConfigFields, f.key)) {
          return UnknownField(f, "config.herd",
                              std::vector<std::string_view>(std::begin(kHerdConfigFields),
                                                            std::end(kHerdConfigFields)));
        }
        if (!f.value.IsScalar()) {
          return Error(f.value, path, "expected a value such as 10m, got " + Describe(f.value));
        }
        const std::string& text = f.value.Scalar();
        Status bad = Status::Ok();
        if (f.key == "hang_timeout") {
          auto d = ParseHangTimeout(text);
          if (d.ok()) l.hang_timeout = *d;
          bad = d.status();
        } else if (f.key == "time_limit") {
          auto d = ParseTimeLimit(text);
          if (d.ok()) l.time_limit = *d;
          bad = d.status();
        } else if (f.key == "grace") {
          auto d = ParseGrace(text);
          if (d.ok()) l.grace = *d;
          bad = d.status();
        } else {
          auto s = ParseSignalSpec(text);
          if (s.ok()) {
            l.limit_signal = s->signal;
            l.limit_signal_before = s->before;
          }
          bad = s.status();
        }
        if (!bad.ok()) return Error(f.value, path, bad.message());
      }
      if (Status s = CheckRunLimits(l); !s.ok()) {
        return Error(section.value, "config.herd", s.message());
      }
    }
    return other_sections;
  }

  Status ParseTask(const YAML::Node& root, Task& task) {
    if (!root.IsMap()) {
      return Error(root, "",
                   "expected a mapping of task fields (name, resources, setup, run, ...), got " +
                       Describe(root));
    }
    HERD_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(root, ""));
    std::vector<std::string_view> known(std::begin(kTaskFields), std::end(kTaskFields));
    std::map<std::string, const Entry*> fields;
    for (const Entry& e : entries) {
      if (Contains(kTaskFields, e.key)) {
        fields[e.key] = &e;
        continue;
      }
      // SkyPilot gives such a task an endpoint and a token of its API server, so that it can
      // launch further work; herd's jobs get neither.
      if (e.key == "api_server_access") {
        if (!e.value.IsNull() && !PlainBool(e.value)) {
          return Error(e.value, e.key, "expected true or false, got " + Describe(e.value));
        }
        if (PlainBool(e.value).value_or(false)) {
          Note(task.notes, e.key_node, e.key,
               "accepted; herd does not give the task a team server endpoint or token "
               "(SKYPILOT_API_SERVER_ENDPOINT is not set): a task that calls the server must be "
               "given its own credentials");
        }
        continue;
      }
      if (e.key == "config") {
        HERD_ASSIGN_OR_RETURN(bool other_sections, ParseConfig(e.value, task));
        if (other_sections) {
          Note(task.notes, e.key_node, e.key,
               "accepted for SkyPilot compatibility; herd does not act on it");
        }
        continue;
      }
      if (Contains(kIgnoredTaskFields, e.key)) {
        Note(task.notes, e.key_node, e.key,
             "accepted for SkyPilot compatibility; herd does not act on it");
        continue;
      }
      auto refused = std::find_if(std::begin(kRefusedTaskFields), std::end(kRefusedTaskFields),
                                  [&](const Refused& r) { return r.field == e.key; });
      if (refused != std::end(kRefusedTaskFields)) return Error(e.key_node, e.key, refused->why);
      return UnknownField(e, "", known);
    }
    auto field = [&](std::string_view name) -> const YAML::Node* {
      auto it = fields.find(std::string(name));
      return it == fields.end() ? nullptr : &it->second->value;
    };

    if (const YAML::Node* n = field("name")) {
      HERD_ASSIGN_OR_RETURN(task.name, String(*n, "name"));
      if (Status s = CheckNameSize(task.name); !s.ok()) return Error(*n, "name", s.message());
    }
    if (const YAML::Node* n = field("num_nodes"); n && !n->IsNull()) {
      auto v = IsPlainScalar(*n) ? ParseInteger(n->Scalar()) : std::nullopt;
      // Digits only but past long long: a positive number too, and far too large.
      bool huge = !v && IsPlainScalar(*n) && !n->Scalar().empty() &&
                  std::all_of(n->Scalar().begin(), n->Scalar().end(),
                              [](char c) { return c >= '0' && c <= '9'; });
      if (!huge && (!v || *v < 1)) {
        std::string hint = n->IsScalar() && !IsPlainScalar(*n) ? " (remove the quotes)" : "";
        return Error(*n, "num_nodes", "expected a positive integer, got " + Describe(*n) + hint);
      }
      if (huge || *v > limits::kMaxTaskNodes) {
        return Error(
            *n, "num_nodes",
            "at most " + std::to_string(limits::kMaxTaskNodes) + " nodes, got " + n->Scalar());
      }
      task.num_nodes = static_cast<int>(*v);
    }

    std::vector<RequiredVar> required_envs, required_secrets, secret_refs;
    if (const YAML::Node* n = field("envs")) {
      HERD_RETURN_IF_ERROR(VarMap(*n, "envs", task.envs, required_envs));
    }
    if (const YAML::Node* n = field("secrets")) {
      if (n->IsSequence()) {
        HERD_RETURN_IF_ERROR(SecretRefs(*n, secret_refs));
      } else {
        HERD_RETURN_IF_ERROR(VarMap(*n, "secrets", task.secrets, required_secrets));
      }
    }
    HERD_RETURN_IF_ERROR(ApplyOverrides(task, required_envs, required_secrets, secret_refs));

    // ${VAR} in workdir and file_mounts: the task's envs (after overrides), then the local
    // environment. Secrets are not used: they must never end up in paths that get printed.
    EnvLookup lookup = [&](const std::string& name) -> std::optional<std::string> {
      if (auto it = task.envs.find(name); it != task.envs.end()) return it->second;
      return getenv_(name);
    };
    if (const YAML::Node* n = field("workdir"); n && !n->IsNull()) {
      if (n->IsMap()) {
        HERD_RETURN_IF_ERROR(GitWorkdirField(*n, lookup, task));
      } else {
        HERD_ASSIGN_OR_RETURN(std::string raw, String(*n, "workdir"));
        HERD_ASSIGN_OR_RETURN(std::string dir, Substitute(raw, *n, "workdir", lookup));
        if (IsUri(dir)) {
          return Error(*n, "workdir",
                       "'" + dir +
                           "' is a URI, not a local directory: for a git repository write "
                           "workdir: {url: URL, ref: BRANCH}");
        }
        task.workdir = ExpandHome(dir, getenv_);
      }
    }
    if (const YAML::Node* n = field("file_mounts")) {
      HERD_RETURN_IF_ERROR(FileMounts(*n, lookup, task));
    }
    if (const YAML::Node* n = field("resources"); n && !n->IsNull()) {
      if (!n->IsMap()) {
        return Error(
            *n, "resources",
            "expected a mapping of resource fields (cpus, accelerators, ...), got " + Describe(*n));
      }
      HERD_RETURN_IF_ERROR(ParseResources(*n, "resources", task.resources, true, task.notes));
    }
    if (const YAML::Node* n = field("setup")) {
      HERD_ASSIGN_OR_RETURN(task.setup, Script(*n, "setup"));
    }
    if (const YAML::Node* n = field("run")) {
      HERD_ASSIGN_OR_RETURN(task.run, Script(*n, "run"));
    }
    return Status::Ok();
  }

  // A string field: any scalar is taken as written; null is "".
  Result<std::string> String(const YAML::Node& n, std::string_view path) const {
    if (n.IsNull()) return std::string();
    if (!n.IsScalar()) return Error(n, path, "expected a string, got " + Describe(n));
    return n.Scalar();
  }

  Result<std::string> Substitute(const std::string& text, const YAML::Node& at,
                                 std::string_view path, const EnvLookup& lookup) const {
    auto out = SubstituteVars(text, lookup);
    if (!out.ok()) return Error(at, path, out.status().message());
    return std::move(out).value();
  }

  // setup/run: a string, or a list of strings joined with newlines (SkyPilot's SDK form).
  Result<std::string> Script(const YAML::Node& n, std::string_view path) const {
    if (n.IsNull()) return std::string();
    if (n.IsScalar()) return n.Scalar();
    if (!n.IsSequence()) {
      return Error(n, path, "expected a string or a list of strings, got " + Describe(n));
    }
    std::string out;
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node item = n[i];
      if (!item.IsScalar()) {
        return Error(item, std::string(path) + "[" + std::to_string(i) + "]",
                     "expected a string (one command line), got " + Describe(item));
      }
      if (i > 0) out += "\n";
      out += item.Scalar();
    }
    return out;
  }

  // envs/secrets: NAME: value; value null means "required, must come from an override".
  Status VarMap(const YAML::Node& n, std::string_view field,
                std::map<std::string, std::string>& out, std::vector<RequiredVar>& required) const {
    if (n.IsNull()) return Status::Ok();
    if (!n.IsMap()) {
      return Error(n, field, "expected a mapping of NAME: value, got " + Describe(n));
    }
    HERD_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(n, field));
    for (const Entry& e : entries) {
      if (!IsEnvName(e.key)) {
        return Error(e.key_node, field,
                     "invalid variable name '" + e.key +
                         "': use letters, digits and '_', not starting with a digit");
      }
      if (e.value.IsNull()) {
        required.push_back({e.key, e.key_node.Mark()});
      } else if (e.value.IsScalar()) {
        out[e.key] = EnvValueText(e.value);
      } else {
        return Error(
            e.value, Child(field, e.key),
            "expected a string, number or bool (null means required), got " + Describe(e.value));
      }
    }
    return Status::Ok();
  }

  // YAML envs < --env < --env-file (REFERENCE.md); then every required variable must be set.
  Status ApplyOverrides(Task& task, const std::vector<RequiredVar>& required_envs,
                        const std::vector<RequiredVar>& required_secrets,
                        const std::vector<RequiredVar>& secret_refs) const {
    for (const std::string& text : options_.env_overrides) {
      HERD_ASSIGN_OR_RETURN(auto kv, ParseEnvOverride(text, "--env", getenv_));
      task.envs[kv.first] = kv.second;
    }
    for (const std::string& path : options_.env_files) {
      HERD_ASSIGN_OR_RETURN(EnvPairs pairs, ReadEnvFile(path));
      for (auto& [k, v] : pairs) task.envs[k] = v;
    }
    for (const std::string& text : options_.secret_overrides) {
      HERD_ASSIGN_OR_RETURN(auto kv, ParseEnvOverride(text, "--secret", getenv_));
      task.secrets[kv.first] = kv.second;
    }
    for (const RequiredVar& r : required_envs) {
      if (!task.envs.count(r.name)) {
        return InvalidArgument(Where(r.mark) + "envs." + r.name + " is required: pass --env " +
                               r.name + "=VALUE (or put it in an --env-file)");
      }
    }
    for (const RequiredVar& r : required_secrets) {
      if (!task.secrets.count(r.name)) {
        return InvalidArgument(Where(r.mark) + "secrets." + r.name +
                               " is required: pass --secret " + r.name + "=VALUE");
      }
    }
    // A reference is a secret kept by a team server. Given with --secret, the value is used as
    // is; otherwise there is nothing that could fill it in.
    for (const RequiredVar& r : secret_refs) {
      if (task.secrets.count(r.name)) continue;
      if (!options_.team_server) {
        return InvalidArgument(
            Where(r.mark) + "secrets: '" + std::string(kSecretRefPrefix) + r.name +
            "' refers to a secret kept by a team server, and no team server is configured "
            "(herd api login): pass --secret " +
            r.name + "=VALUE, or write secrets: {" + r.name + ": null} and pass --secret " +
            r.name);
      }
      return InvalidArgument(
          Where(r.mark) + "secrets: '" + std::string(kSecretRefPrefix) + r.name +
          "': the team server does not hand its stored secrets to tasks: pass --secret " + r.name +
          "=VALUE (it travels to the server over TLS with the task)");
    }
    return Status::Ok();
  }

  // secrets: as a list of references to secrets a team server keeps, "- secrets:NAME".
  Status SecretRefs(const YAML::Node& n, std::vector<RequiredVar>& refs) const {
    std::set<std::string> seen;
    for (std::size_t i = 0; i < n.size(); ++i) {
      const YAML::Node item = n[i];
      std::string path = "secrets[" + std::to_string(i) + "]";
      std::string text = item.IsScalar() ? std::string(Trim(item.Scalar())) : "";
      if (text.rfind(kSecretRefPrefix, 0) != 0) {
        return Error(item, path,
                     "expected a reference to a stored secret, 'secrets:NAME' (e.g. "
                     "secrets:HF_TOKEN), got " +
                         Describe(item) + "; for values write a mapping, secrets: {NAME: VALUE}");
      }
      std::string name = text.substr(kSecretRefPrefix.size());
      if (!IsEnvName(name)) {
        return Error(item, path,
                     "invalid secret name '" + name +
                         "': use letters, digits and '_', not starting with a digit");
      }
      if (!seen.insert(name).second) {
        return Error(item, path, "'" + text + "' is given twice: keep one");
      }
      refs.push_back({name, item.Mark()});
    }
    return Status::Ok();
  }

  // workdir: {url, ref}: a git repository, cloned by the controller before it syncs the workdir.
  Status GitWorkdirField(const YAML::Node& n, const EnvLookup& lookup, Task& task) const {
    HERD_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(n, "workdir"));
    GitWorkdir git;
    const Entry* url = nullptr;
    for (const Entry& e : entries) {
      std::string path = Child("workdir", e.key);
      if (e.key != "url" && e.key != "ref") return UnknownField(e, "workdir", {"url", "ref"});
      HERD_ASSIGN_OR_RETURN(std::string raw, String(e.value, path));
      HERD_ASSIGN_OR_RETURN(std::string value, Substitute(raw, e.value, path, lookup));
      value = std::string(Trim(value));
      if (e.key == "url") {
        url = &e;
        if (value.empty() || value[0] == '-' || value.find_first_of(" \t\n") != std::string::npos) {
          return Error(e.value.IsNull() ? e.key_node : e.value, path,
                       "expected a git URL (https://..., git@host:repo, file:///path or a "
                       "local path), got " +
                           Describe(e.value));
        }
        git.url = value;
      } else {
        if (!value.empty() && (value[0] == '-' || value.find("..") != std::string::npos ||
                               value.find_first_of(" \t\n~^:?*[\\") != std::string::npos)) {
          return Error(e.value, path,
                       "expected a branch, tag or commit name, got " + Describe(e.value));
        }
        git.ref = value;
      }
    }
    if (url == nullptr) return Error(n, "workdir", "a git workdir needs url: (and may give ref:)");
    task.git_workdir = std::move(git);
    return Status::Ok();
  }

  Status FileMounts(const YAML::Node& n, const EnvLookup& lookup, Task& task) const {
    if (n.IsNull()) return Status::Ok();
    if (!n.IsMap()) {
      return Error(n, "file_mounts",
                   "expected a mapping of /remote/path: /local/path, got " + Describe(n));
    }
    HERD_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(n, "file_mounts"));
    for (const Entry& e : entries) {
      std::string path = Child("file_mounts", e.key);
      if (e.key.empty()) return Error(e.key_node, "file_mounts", "empty remote path");
      HERD_ASSIGN_OR_RETURN(std::string remote, Substitute(e.key, e.key_node, path, lookup));
      if (task.file_mounts.count(remote) || task.storage_mounts.count(remote)) {
        return Error(e.key_node, path, "mounts to '" + remote + "' twice: keep one");
      }
      if (e.value.IsMap()) {
        if (static_cast<int>(task.storage_mounts.size()) >= limits::kMaxStorageMounts) {
          return Error(
              e.key_node, path,
              "at most " + std::to_string(limits::kMaxStorageMounts) + " bucket mounts per task");
        }
        HERD_ASSIGN_OR_RETURN(StorageMount m, StorageMountField(e.value, path, lookup));
        task.storage_mounts.emplace(remote, std::move(m));
        continue;
      }
      if (!e.value.IsScalar() || e.value.Scalar().empty()) {
        // A null value's mark is wherever the next token starts: point at the key instead.
        return Error(e.value.IsNull() ? e.key_node : e.value, path,
                     "expected a local path, a bucket URI (s3://bucket/prefix) or a bucket "
                     "{name, source, mode}, got " +
                         Describe(e.value));
      }
      HERD_ASSIGN_OR_RETURN(std::string local, Substitute(e.value.Scalar(), e.value, path, lookup));
      if (IsUri(local)) {
        // SkyPilot: a bucket URI as the value is copied to the node (mode COPY).
        StorageMount m;
        m.mode = "COPY";
        HERD_RETURN_IF_ERROR(BucketUri(local, e.value, path, m));
        if (static_cast<int>(task.storage_mounts.size()) >= limits::kMaxStorageMounts) {
          return Error(
              e.key_node, path,
              "at most " + std::to_string(limits::kMaxStorageMounts) + " bucket mounts per task");
        }
        task.storage_mounts.emplace(remote, std::move(m));
        continue;
      }
      task.file_mounts.emplace(remote, ExpandHome(local, getenv_));
    }
    return Status::Ok();
  }

  // resources.image_id: "docker:IMAGE" runs the task in that container image; a cloud's machine
  // image (a string or SkyPilot's region -> image mapping) is noted, as herd does not pick VMs'
  // images from a task.
  Status ParseImageId(const Entry& e, const std::string& path, Resources& r,
                      std::vector<std::string>& notes) const {
    const std::string at = Child(path, "image_id");
    if (!e.value.IsScalar() || !e.value.Scalar().starts_with(kDockerImagePrefix)) {
      Note(notes, e.key_node, at, "accepted for SkyPilot compatibility; herd does not act on it");
      return Status::Ok();
    }
    Result<std::string> image = ParseContainerImage(e.value.Scalar());
    if (!image.ok()) return Error(e.value, at, image.status().message());
    r.container_image = *image;
    return Status::Ok();
  }

  // "s3://bucket[/prefix]" into m.bucket/m.prefix; other schemes are refused, naming the ones
  // herd has.
  Status BucketUri(const std::string& uri, const YAML::Node& at, const std::string& path,
                   StorageMount& m) const {
    std::size_t sep = uri.find("://");
    std::string scheme = uri.substr(0, sep);
    if (scheme != "s3") {
      return Error(at, path,
                   "'" + uri + "': " + scheme +
                       ":// buckets are not supported by herd; S3 and S3-compatible stores "
                       "are (s3://bucket/prefix, endpoint from AWS_ENDPOINT_URL_S3, "
                       "AWS_ENDPOINT_URL or endpoint_url in ~/.aws/config)");
    }
    std::string rest = uri.substr(sep + 3);
    std::size_t slash = rest.find('/');
    m.bucket = rest.substr(0, slash);
    m.prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
    while (!m.prefix.empty() && m.prefix.back() == '/') m.prefix.pop_back();
    m.store = "s3";
    if (Status s = CheckBucketName(m.bucket); !s.ok()) {
      return Error(at, path, "'" + uri + "': " + s.message());
    }
    return Status::Ok();
  }

  // {name, source, store, mode, persistent}: SkyPilot's storage object.
  Result<StorageMount> StorageMountField(const YAML::Node& n, const std::string& path,
                                         const EnvLookup& lookup) const {
    static constexpr std::string_view kFields[] = {"name", "source", "store", "mode", "persistent"};
    HERD_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(n, path));
    StorageMount m;
    const Entry *name = nullptr, *source = nullptr, *store = nullptr;
    for (const Entry& e : entries) {
      if (!Contains(kFields, e.key)) {
        return UnknownField(e, path,
                            std::vector<std::string_view>(std::begin(kFields), std::end(kFields)));
      }
      std::string field = Child(path, e.key);
      if (e.key == "persistent") {
        auto b = PlainBool(e.value);
        if (!b) return Error(e.value, field, "expected true or false, got " + Describe(e.value));
        m.persistent = *b;
        continue;
      }
      if (!e.value.IsScalar() || e.value.Scalar().empty()) {
        if (e.key == "source" && e.value.IsSequence()) {
          return Error(e.value, field,
                       "a list of sources is not supported by herd: give one local directory or "
                       "one bucket URI");
        }
        return Error(e.value.IsNull() ? e.key_node : e.value, field,
                     "expected a string, got " + Describe(e.value));
      }
      HERD_ASSIGN_OR_RETURN(std::string value,
                            Substitute(e.value.Scalar(), e.value, field, lookup));
      if (e.key == "name") {
        name = &e;
        if (Status s = CheckBucketName(value); !s.ok()) return Error(e.value, field, s.message());
        m.bucket = value;
      } else if (e.key == "source") {
        source = &e;
        if (IsUri(value)) {
          HERD_RETURN_IF_ERROR(BucketUri(value, e.value, field, m));
        } else {
          m.source = ExpandHome(value, getenv_);
        }
      } else if (e.key == "store") {
        store = &e;
        std::string lower = value;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        static constexpr std::string_view kOtherStores[] = {"gcs", "azure",  "r2", "ibm",
                                                            "oci", "nebius", "cos"};
        if (Contains(kOtherStores, lower)) {
          return Error(e.value, field,
                       "store '" + value +
                           "' is not supported by herd; use store: s3 (S3 or any S3-compatible "
                           "endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or endpoint_url in "
                           "~/.aws/config)");
        }
        if (lower != "s3") {
          return Error(e.value, field, "unknown store '" + value + "': expected s3");
        }
        m.store = lower;
      } else if (e.key == "mode") {
        std::string upper = value;
        std::transform(upper.begin(), upper.end(), upper.begin(),
                       [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
        if (upper != "MOUNT" && upper != "COPY" && upper != "MOUNT_CACHED") {
          return Error(e.value, field,
                       "unknown mode '" + value + "': expected MOUNT, COPY or MOUNT_CACHED");
        }
        m.mode = upper;
      }
    }
    (void)store;
    if (name == nullptr && source == nullptr) {
      return Error(n, path,
                   "a bucket needs a name (herd makes the bucket when it does not exist) or a "
                   "source (s3://bucket/prefix, or a local directory to upload with a name)");
    }
    if (name != nullptr && source != nullptr && m.source.empty()) {
      return Error(name->key_node, Child(path, "name"),
                   "give either name or a bucket URI as source, not both (the URI names the "
                   "bucket)");
    }
    if (name == nullptr && !m.source.empty()) {
      return Error(source->value, Child(path, "source"),
                   "a local source is uploaded into a bucket: give the bucket's name too");
    }
    m.create = name != nullptr;
    return m;
  }

  // One resources mapping into r. top: the task's own resources (any_of/ordered allowed).
  Status ParseResources(const YAML::Node& n, const std::string& path, Resources& r, bool top,
                        std::vector<std::string>& notes) const {
    HERD_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(n, path));
    std::vector<std::string_view> known(std::begin(kResourceFields), std::end(kResourceFields));
    std::map<std::string, const Entry*> fields;
    for (const Entry& e : entries) {
      if (Contains(kIgnoredResourceFields, e.key)) {
        Note(notes, e.key_node, Child(path, e.key),
             "accepted for SkyPilot compatibility; herd does not act on it");
        continue;
      }
      if (!Contains(kResourceFields, e.key)) return UnknownField(e, path, known);
      if (!top && (e.key == "any_of" || e.key == "ordered")) {
        return Error(e.key_node, Child(path, e.key),
                     "candidates cannot be nested: move them to resources." + e.key);
      }
      fields[e.key] = &e;
    }
    auto field = [&](std::string_view name) -> const Entry* {
      auto it = fields.find(std::string(name));
      return it == fields.end() ? nullptr : it->second;
    };

    HERD_RETURN_IF_ERROR(
        Infra(field("infra"), field("cloud"), field("region"), field("zone"), path, r));
    if (const Entry* e = field("cpus"); e && !e->value.IsNull()) {
      auto a = e->value.IsScalar() ? ParseAmount(e->value.Scalar(), false) : std::nullopt;
      if (!a) {
        return Error(e->value, Child(path, "cpus"),
                     "expected a number or 'N+', got " + Describe(e->value));
      }
      r.cpus = a->value;
      r.cpus_at_least = a->at_least;
    }
    if (const Entry* e = field("memory"); e && !e->value.IsNull()) {
      if (!e->value.IsScalar()) {
        return Error(e->value, Child(path, "memory"),
                     "expected a number of GB, a size (64GB, 1TB) or either with '+' (32+), got " +
                         Describe(e->value));
      }
      auto a = ParseSize(e->value.Scalar());
      if (!a.ok()) return Error(e->value, Child(path, "memory"), a.status().message());
      r.memory_gb = a->value;
      r.memory_at_least = a->at_least;
    }
    // gpus: another name of accelerators (the same forms); giving both is a mistake.
    if (const Entry* e = field("accelerators"); e && field("gpus")) {
      const Entry* later =
          field("gpus")->key_node.Mark().pos > e->key_node.Mark().pos ? field("gpus") : e;
      return Error(later->key_node, Child(path, later->key),
                   "gpus is another name of accelerators: give one of them");
    }
    // Several accelerators at the top become candidates below (SkyPilot: a list is `ordered`,
    // a set or mapping `any_of`); inside a candidate the first is used, with a note.
    std::vector<Accelerator> acc_alternatives;
    bool acc_ordered = false;
    const Entry* acc_entry = field("accelerators") ? field("accelerators") : field("gpus");
    if (acc_entry) {
      HERD_RETURN_IF_ERROR(Accelerators(acc_entry->value, Child(path, acc_entry->key), r, notes,
                                        top ? &acc_alternatives : nullptr, &acc_ordered));
    }
    if (const Entry* e = field("ports")) {
      HERD_RETURN_IF_ERROR(Ports(e->value, Child(path, "ports"), r));
    }
    if (const Entry* e = field("disk_size"); e && !e->value.IsNull()) {
      std::string at = Child(path, "disk_size");
      if (!e->value.IsScalar()) {
        return Error(
            e->value, at,
            "expected a number of GB or a size (256, 256GB, 1TB), got " + Describe(e->value));
      }
      auto a = ParseSize(e->value.Scalar());
      if (!a.ok()) return Error(e->value, at, a.status().message());
      if (a->at_least) {
        return Error(e->value, at, "a disk has one size: remove the '+'");
      }
      // SkyPilot floors a size with a unit to whole GB.
      double gb = std::floor(a->value);
      if (gb < 1 || gb > limits::kMaxTaskDiskSizeGb) {
        return Error(e->value, at,
                     "expected from 1 GB to " + std::to_string(limits::kMaxTaskDiskSizeGb) +
                         " GB, got " + Describe(e->value) + " (" + FormatNumber(a->value) + " GB)");
      }
      r.disk_size = static_cast<int>(gb);
    }
    if (const Entry* e = field("use_spot"); e && !e->value.IsNull()) {
      auto b = PlainBool(e->value);
      if (!b) {
        return Error(e->value, Child(path, "use_spot"),
                     "expected true or false, got " + Describe(e->value));
      }
      r.use_spot = *b;
    }
    if (const Entry* e = field("instance_type"); e && !e->value.IsNull()) {
      if (!IsPlainScalar(e->value) || Trim(e->value.Scalar()).empty() ||
          e->value.Scalar().find_first_of(" \t\n") != std::string::npos) {
        return Error(
            e->value, Child(path, "instance_type"),
            "expected an instance type name (e.g. p4d.24xlarge), got " + Describe(e->value));
      }
      r.instance_type = e->value.Scalar();
    }
    if (const Entry* e = field("job_recovery"); e && !e->value.IsNull()) {
      HERD_RETURN_IF_ERROR(ParseJobRecovery(e->value, Child(path, "job_recovery"), r));
    }
    if (const Entry* e = field("image_id"); e && !e->value.IsNull()) {
      HERD_RETURN_IF_ERROR(ParseImageId(*e, path, r, notes));
    }
    const Entry* any_of = field("any_of");
    const Entry* ordered = field("ordered");
    if (any_of && ordered) {
      const Entry* later =
          any_of->key_node.Mark().pos > ordered->key_node.Mark().pos ? any_of : ordered;
      return Error(later->key_node, path, "give either any_of or ordered, not both");
    }
    if (acc_alternatives.size() > 1 && (any_of || ordered)) {
      return Error(acc_entry->value, Child(path, acc_entry->key),
                   "several accelerators and " + std::string(any_of ? "any_of" : "ordered") +
                       " together: give one accelerator per candidate of " +
                       (any_of ? "any_of" : "ordered"));
    }
    if (any_of) HERD_RETURN_IF_ERROR(Candidates(*any_of, path, r, r.any_of, notes));
    if (ordered) HERD_RETURN_IF_ERROR(Candidates(*ordered, path, r, r.ordered, notes));
    if (acc_alternatives.size() > 1) {
      std::vector<Resources>& out = acc_ordered ? r.ordered : r.any_of;
      for (const Accelerator& a : acc_alternatives) {
        Resources c = r;
        c.any_of.clear();
        c.ordered.clear();
        c.accelerator = a.name;
        c.accelerator_count = a.count;
        out.push_back(std::move(c));
      }
    }
    return Status::Ok();
  }

  // job_recovery: a strategy name, or {strategy, max_restarts_on_errors} (SkyPilot's forms).
  // Strategy names are matched case-insensitively, as SkyPilot's schema does.
  Status ParseJobRecovery(const YAML::Node& n, const std::string& path, Resources& r) const {
    JobRecovery jr;
    auto strategy = [&](const YAML::Node& v, const std::string& at) -> Status {
      std::string name = v.IsScalar() ? std::string(Trim(v.Scalar())) : "";
      for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (!Contains(kRecoveryStrategies, name)) {
        return Error(v, at,
                     "expected a recovery strategy (FAILOVER, EAGER_NEXT_REGION or none), got " +
                         Describe(v));
      }
      jr.strategy = name;
      return Status::Ok();
    };
    if (n.IsScalar()) {
      HERD_RETURN_IF_ERROR(strategy(n, path));
      r.job_recovery = jr;
      return Status::Ok();
    }
    if (!n.IsMap()) {
      return Error(n, path,
                   "expected a strategy name or a mapping {strategy, max_restarts_on_errors}, "
                   "got " +
                       Describe(n));
    }
    HERD_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(n, path));
    std::vector<std::string_view> known(std::begin(kJobRecoveryFields),
                                        std::end(kJobRecoveryFields));
    for (const Entry& e : entries) {
      if (!Contains(kJobRecoveryFields, e.key)) return UnknownField(e, path, known);
      std::string at = Child(path, e.key);
      if (e.key == "strategy") {
        if (!e.value.IsNull()) HERD_RETURN_IF_ERROR(strategy(e.value, at));
        continue;
      }
      if (e.value.IsNull()) continue;
      if (e.key == "recover_on_exit_codes") {
        HERD_RETURN_IF_ERROR(ExitCodes(e.value, at, jr.recover_on_exit_codes));
        continue;
      }
      auto v = IsPlainScalar(e.value) ? ParseInteger(e.value.Scalar()) : std::nullopt;
      if (!v || *v < 0 || *v > limits::kMaxRestartsOnErrors) {
        return Error(e.value, at,
                     "expected an integer from 0 to " +
                         std::to_string(limits::kMaxRestartsOnErrors) + ", got " +
                         Describe(e.value));
      }
      jr.max_restarts_on_errors = static_cast<int>(*v);
    }
    r.job_recovery = jr;
    return Status::Ok();
  }

  // recover_on_exit_codes: one code or a list of distinct codes, each an integer 0-255.
  Status ExitCodes(const YAML::Node& n, const std::string& path, std::vector<int>& out) const {
    auto one = [&](const YAML::Node& item, const std::string& at) -> Status {
      auto v = IsPlainScalar(item) ? ParseInteger(item.Scalar()) : std::nullopt;
      if (!v || *v < 0 || *v > 255) {
        std::string hint = item.IsScalar() && !IsPlainScalar(item) ? " (remove the quotes)" : "";
        return Error(
            item, at,
            "expected an exit code, an integer from 0 to 255, got " + Describe(item) + hint);
      }
      if (std::find(out.begin(), out.end(), static_cast<int>(*v)) != out.end()) {
        return Error(item, at, "exit code " + std::to_string(*v) + " is given twice: keep one");
      }
      out.push_back(static_cast<int>(*v));
      return Status::Ok();
    };
    if (n.IsSequence()) {
      for (std::size_t i = 0; i < n.size(); ++i) {
        HERD_RETURN_IF_ERROR(one(n[i], path + "[" + std::to_string(i) + "]"));
      }
      return Status::Ok();
    }
    if (n.IsMap()) {
      return Error(n, path,
                   "expected an exit code or a list of them (e.g. [33, 34]), got a mapping");
    }
    return one(n, path);
  }

  // any_of/ordered: each candidate starts from the fields around it and overrides some.
  Status Candidates(const Entry& e, const std::string& path, const Resources& base,
                    std::vector<Resources>& out, std::vector<std::string>& notes) const {
    std::string list_path = Child(path, e.key);
    if (!e.value.IsSequence() || e.value.size() == 0) {
      return Error(e.value, list_path,
                   "expected a non-empty list of resource mappings, got " + Describe(e.value));
    }
    std::vector<Resources> candidates;
    for (size_t i = 0; i < e.value.size(); ++i) {
      const YAML::Node item = e.value[i];
      std::string item_path = list_path + "[" + std::to_string(i) + "]";
      if (!item.IsMap()) {
        return Error(item, item_path,
                     "expected a mapping of resource fields, got " + Describe(item));
      }
      Resources c = base;
      c.any_of.clear();
      c.ordered.clear();
      HERD_RETURN_IF_ERROR(ParseResources(item, item_path, c, false, notes));
      candidates.push_back(std::move(c));
    }
    out = std::move(candidates);
    return Status::Ok();
  }

  // infra, or SkyPilot's older cloud/region/zone (turned into the infra form).
  Status Infra(const Entry* infra, const Entry* cloud, const Entry* region, const Entry* zone,
               const std::string& path, Resources& r) const {
    const Entry* legacy = cloud ? cloud : region ? region : zone;
    if (infra && legacy) {
      return Error(legacy->key_node, Child(path, legacy->key),
                   "give either infra or cloud/region/zone, not both (e.g. infra: aws/us-east-1)");
    }
    auto text = [&](const Entry* e) -> Result<std::string> {
      if (!e || e->value.IsNull()) return std::string();
      if (!e->value.IsScalar() || Trim(e->value.Scalar()).empty()) {
        return Error(e->value, Child(path, e->key), "expected a name, got " + Describe(e->value));
      }
      return std::string(Trim(e->value.Scalar()));
    };
    if (legacy) {
      HERD_ASSIGN_OR_RETURN(std::string c, text(cloud));
      HERD_ASSIGN_OR_RETURN(std::string reg, text(region));
      HERD_ASSIGN_OR_RETURN(std::string z, text(zone));
      std::string value = c.empty() ? "*" : c;
      if (!reg.empty() || !z.empty()) value += "/" + (reg.empty() ? "*" : reg);
      if (!z.empty()) value += "/" + z;
      return SetInfra(value, legacy->value, Child(path, legacy->key), r);
    }
    if (!infra || infra->value.IsNull()) return Status::Ok();
    HERD_ASSIGN_OR_RETURN(std::string value, text(infra));
    return SetInfra(value, infra->value, Child(path, "infra"), r);
  }

  Status SetInfra(std::string value, const YAML::Node& at, const std::string& path,
                  Resources& r) const {
    auto bad = [&] {
      return Error(
          at, path,
          "expected CLOUD[/REGION[/ZONE]], k8s/CONTEXT, ssh/POOL or local, got '" + value + "'");
    };
    if (value.find_first_of(" \t\n") != std::string::npos) return bad();
    size_t slash = value.find('/');
    std::string cloud = value.substr(0, slash);
    if (cloud.empty()) return bad();
    for (char& c : cloud) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string rest = slash == std::string::npos ? "" : value.substr(slash);
    bool kubernetes = cloud == "k8s" || cloud == "kubernetes";
    // A Kubernetes context may contain '/', other clouds have plain region and zone names.
    if (!rest.empty()) {
      if (rest.size() == 1) return bad();
      if (!kubernetes) {
        if (rest.find("//") != std::string::npos || rest.back() == '/' ||
            std::count(rest.begin(), rest.end(), '/') > 2) {
          return bad();
        }
      }
    }
    r.infra = cloud + rest;
    return Status::Ok();
  }

  // alternatives (top-level resources only): receives every choice when there are several, and
  // ordered whether they came as a list.
  Status Accelerators(const YAML::Node& n, const std::string& path, Resources& r,
                      std::vector<std::string>& notes, std::vector<Accelerator>* alternatives,
                      bool* ordered) const {
    if (n.IsNull()) {
      r.accelerator.clear();
      r.accelerator_count = 0;
      return Status::Ok();
    }
    std::vector<Accelerator> choices;
    auto from_text = [&](const YAML::Node& at, const std::string& text,
                         const std::string& at_path) -> Status {
      auto acc = ParseAccelerator(text);
      if (!acc.ok()) return Error(at, at_path, acc.status().message());
      choices.push_back(std::move(acc).value());
      return Status::Ok();
    };
    if (n.IsScalar()) {
      HERD_RETURN_IF_ERROR(from_text(n, n.Scalar(), path));
    } else if (n.IsSequence()) {  // a list of alternatives
      for (size_t i = 0; i < n.size(); ++i) {
        const YAML::Node item = n[i];
        std::string item_path = path + "[" + std::to_string(i) + "]";
        if (!item.IsScalar()) {
          return Error(item, item_path,
                       "expected NAME or NAME:COUNT (e.g. L4:4), got " + Describe(item));
        }
        HERD_RETURN_IF_ERROR(from_text(item, item.Scalar(), item_path));
      }
    } else {  // {NAME: COUNT}, or a set {V100:1, A100:1} whose keys carry the counts
      HERD_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(n, path));
      for (const Entry& e : entries) {
        std::string entry_path = Child(path, e.key);
        if (e.value.IsNull()) {
          HERD_RETURN_IF_ERROR(from_text(e.key_node, e.key, entry_path));
          continue;
        }
        auto count = IsPlainScalar(e.value) ? ParseNumber(e.value.Scalar()) : std::nullopt;
        if (!count || *count <= 0) {
          return Error(
              e.value, entry_path,
              "expected a positive count (e.g. " + e.key + ": 4), got " + Describe(e.value));
        }
        if (!IsAcceleratorName(e.key)) {
          return Error(e.key_node, path, "'" + e.key + "' is not an accelerator name (e.g. L4)");
        }
        choices.push_back({e.key, *count});
      }
    }
    if (choices.empty()) {
      return Error(n, path,
                   "expected an accelerator such as L4:4, got an empty " +
                       std::string(n.IsMap() ? "mapping" : "list"));
    }
    if (choices.size() > 1 && alternatives != nullptr) {
      *alternatives = choices;
      *ordered = n.IsSequence();
    } else if (choices.size() > 1) {
      Note(notes, n, path,
           std::to_string(choices.size()) + " alternatives given; herd uses the first, " +
               choices[0].name + ":" + FormatNumber(choices[0].count));
    }
    r.accelerator = choices[0].name;
    r.accelerator_count = choices[0].count;
    return Status::Ok();
  }

  Status Ports(const YAML::Node& n, const std::string& path, Resources& r) const {
    r.ports.clear();
    if (n.IsNull()) return Status::Ok();
    auto one = [&](const YAML::Node& item, const std::string& item_path) -> Status {
      if (!item.IsScalar()) {
        return Error(item, item_path,
                     "expected a port (8080) or a range ('10000-10100'), got " + Describe(item));
      }
      auto port = ParsePortRange(item.Scalar());
      if (!port.ok()) return Error(item, item_path, port.status().message());
      r.ports.push_back(std::move(port).value());
      return Status::Ok();
    };
    if (n.IsSequence()) {
      for (size_t i = 0; i < n.size(); ++i) {
        HERD_RETURN_IF_ERROR(one(n[i], path + "[" + std::to_string(i) + "]"));
      }
      return Status::Ok();
    }
    if (n.IsMap()) {
      return Error(n, path,
                   "expected a port (8080), a range ('10000-10100') or a list of them, got a "
                   "mapping");
    }
    return one(n, path);
  }

  std::string_view source_;
  const ParseOptions& options_;
  EnvLookup getenv_;
};

}  // namespace

namespace {

Result<Pipeline> ParseYaml(std::string_view yaml, std::string_view source_name,
                           const ParseOptions& options, bool one_task) {
  HERD_RETURN_IF_ERROR(CheckYamlText(yaml, source_name));
  try {
    return TaskParser(source_name, options).Parse(yaml, one_task);
  } catch (const std::exception& e) {  // yaml-cpp or std failures that escaped the parser
    return Internal(std::string(source_name) + ": unexpected error while parsing: " + e.what());
  }
}

Result<std::string> ReadTaskText(const std::string& path) {
  return ReadTextFile(path, limits::kMaxTaskFileBytes,
                      "a task file may be at most " + BytesText(limits::kMaxTaskFileBytes) +
                          ": keep data in the files a task mounts (file_mounts, "
                          "workdir), not in the task file");
}

}  // namespace

Result<Task> ParseTaskYaml(std::string_view yaml, std::string_view source_name,
                           const ParseOptions& options) {
  HERD_ASSIGN_OR_RETURN(Pipeline p, ParseYaml(yaml, source_name, options, true));
  return std::move(p.tasks.front());
}

Result<Task> ParseTaskFile(const std::string& path, const ParseOptions& options) {
  HERD_ASSIGN_OR_RETURN(std::string text, ReadTaskText(path));
  return ParseTaskYaml(text, path, options);
}

Result<Pipeline> ParsePipelineYaml(std::string_view yaml, std::string_view source_name,
                                   const ParseOptions& options) {
  return ParseYaml(yaml, source_name, options, false);
}

Result<Pipeline> ParsePipelineFile(const std::string& path, const ParseOptions& options) {
  HERD_ASSIGN_OR_RETURN(std::string text, ReadTaskText(path));
  return ParsePipelineYaml(text, path, options);
}

const Resources& PrimaryResources(const Task& task) {
  if (!task.resources.ordered.empty()) return task.resources.ordered.front();
  if (!task.resources.any_of.empty()) return task.resources.any_of.front();
  return task.resources;
}

}  // namespace herd::task
