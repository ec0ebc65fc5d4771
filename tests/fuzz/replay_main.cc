// tests/fuzz/replay_main.cc — runs a fuzz target over files, without libFuzzer.
//
// The project's normal and sanitizer builds use g++, which has no libFuzzer.
// There each fuzz target is linked with this main() instead, and meson runs it
// over the committed seed corpus (and any reproducer added to it): the
// targets' invariants become a regression test of every build, including the
// ASan+UBSan one. Usage: fuzz_<name> FILE_OR_DIR... (arguments starting with
// '-' are ignored, so libFuzzer-style flags do no harm).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_check.h"

namespace {

void Collect(const std::string& path, std::vector<std::string>* out) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "replay: cannot stat %s\n", path.c_str());
    std::exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    out->push_back(path);
    return;
  }
  DIR* d = opendir(path.c_str());
  if (!d) {
    std::fprintf(stderr, "replay: cannot open %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) Collect(path + "/" + n, out);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] != '-') Collect(argv[i], &files);
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...   (no input files found)\n", argv[0]);
    return 2;
  }
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay %s (%zu bytes)\n", f.c_str(), data.size());
    // A heap copy of exactly the input's size, so ASan sees reads past its end.
    uint8_t* copy = new uint8_t[data.size() ? data.size() : 1];
    std::copy(data.begin(), data.end(), copy);
    LLVMFuzzerTestOneInput(copy, data.size());
    delete[] copy;
  }
  std::printf("replayed %zu inputs: all invariants held\n", files.size());
  return 0;
}
