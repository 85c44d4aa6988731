// Replay driver for fuzz targets when libFuzzer is not available: runs
// LLVMFuzzerTestOneInput over every file named on the command line (directories are walked).
// A crash fails the run; so does a path that does not exist or no input at all, so a moved
// corpus is not mistaken for a clean pass. A clean pass prints how many inputs were replayed.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static int replay(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return 1;
}

int main(int argc, char** argv) {
  int n = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file()) n += replay(e.path());
    } else if (std::filesystem::is_regular_file(p)) {
      n += replay(p);
    } else {
      std::fprintf(stderr, "no such corpus file or folder: %s\n", argv[i]);
      return 1;
    }
  }
  std::printf("replayed %d inputs\n", n);
  return n > 0 ? 0 : 1;
}
