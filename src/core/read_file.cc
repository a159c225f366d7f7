#include "core/read_file.h"

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

}  // namespace mlaserve
