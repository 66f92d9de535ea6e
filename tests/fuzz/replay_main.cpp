// The main() of a fuzz target in the regular (GCC) build: runs the target once on every file named
// on the command line, or on every file in a named directory (the committed seed corpus), so that
// the corpus is a regression test without libFuzzer. The clang build links libFuzzer instead.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (!entry.is_regular_file()) continue;
        errors += RunFile(entry.path());
        ++files;
      }
    } else {
      errors += RunFile(arg);
      ++files;
    }
  }
  std::printf("%d input(s) replayed, %d unreadable\n", files, errors);
  return files > 0 && errors == 0 ? 0 : 1;
}
