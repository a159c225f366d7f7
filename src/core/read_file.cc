#include "core/read_file.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace mlaserve {

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(path + ": cannot open");
  std::stringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return Status::Error(path + ": read failed");
  return contents.str();
}

Result<std::string> ReadTextFile(const std::string& path, size_t max_bytes) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return Status::Error(path + ": cannot open");
  if (S_ISDIR(info.st_mode)) return Status::Error(path + ": is a directory, not a file");
  if (!S_ISREG(info.st_mode)) return Status::Error(path + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(path + ": cannot open");
  std::string contents(max_bytes + 1, '\0');
  in.read(contents.data(), std::streamsize(contents.size()));
  if (in.bad()) return Status::Error(path + ": read failed");
  contents.resize(size_t(in.gcount()));
  if (contents.size() > max_bytes) {
    return Status::Error(path + ": larger than the " + std::to_string(max_bytes) + " bytes allowed");
  }
  return contents;
}

}  // namespace mlaserve
