// Fuzz target: the task YAML parser (controller/task). A task file is user input: any text must
// give either a task or an error that names its place ("fuzz.yaml:LINE:COL: ..." or "fuzz.yaml:
// ..."), never a crash or an escaped exception; and a parsed task's secrets never reach its JSON
// form.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "controller/task/task.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view yaml(reinterpret_cast<const char*>(data), size);
  herd::task::ParseOptions options;
  // Deterministic and hermetic: no variable of the fuzzing machine leaks into the result.
  options.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  auto task = herd::task::ParseTaskYaml(yaml, "fuzz.yaml", options);
  if (!task.ok()) {
    if (task.status().message().rfind("fuzz.yaml", 0) != 0) std::abort();
    return 0;
  }
  if (task->num_nodes < 1) std::abort();
  // The JSON form (`herd check -o json`) is valid JSON whose secrets are all redacted.
  boost::system::error_code ec;
  boost::json::value json = boost::json::parse(herd::task::ToJson(*task), ec);
  if (ec || !json.is_object()) std::abort();
  if (const auto* secrets = json.as_object().if_contains("secrets")) {
    if (!secrets->is_object() || secrets->as_object().size() != task->secrets.size()) std::abort();
    for (const auto& kv : secrets->as_object()) {
      if (kv.value() != "<redacted>") std::abort();
    }
  }
  herd::task::ResourcesSummary(*task);
  herd::task::ToSpec(*task);
  return 0;
}
