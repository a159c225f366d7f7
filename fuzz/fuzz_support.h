// Helpers shared by the libFuzzer targets in fuzz/: splitting one input into parts, files in
// /dev/shm for parsers that only read paths, and the repository's own files (the bundled model).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits at NUL bytes into at most `max_parts` parts (the last keeps any further NULs): how a
// target taking several files (a template and its context) reads one input.
inline std::vector<std::string_view> SplitParts(std::string_view input, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t nul = input.find('\0');
    if (nul == std::string_view::npos) break;
    parts.push_back(input.substr(0, nul));
    input.remove_prefix(nul + 1);
  }
  parts.push_back(input);
  parts.resize(max_parts);  // missing parts are empty
  return parts;
}

// A directory of this process's own under /dev/shm (memory, not disk: one write per input),
// removed at exit. Parsers with only a path entry point read their input from here.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string d = "/dev/shm/mlaserve-fuzz-" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all("/dev/shm/mlaserve-fuzz-" + std::to_string(::getpid()), ignored);
    });
    return d;
  }();
  return dir;
}

// Writes `bytes` to ScratchDir()/name and returns the path.
inline std::string WriteScratchFile(const std::string& name, std::string_view bytes) {
  const std::string path = ScratchDir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  if (std::fclose(f) != 0) std::abort();
  return path;
}

// A path inside the source tree (MLASERVE_SOURCE_DIR is set by fuzz/CMakeLists.txt).
inline std::string SourcePath(const std::string& relative) { return std::string(MLASERVE_SOURCE_DIR) + "/" + relative; }

}  // namespace mlaserve::fuzz
