#include "cli/json_file.h"

#include <fstream>

namespace mlaserve::cli {

Status WriteJsonFile(const std::string& path, const nlohmann::json& value) {
  std::ofstream f(path, std::ios::trunc);
  f << value.dump(2) << "\n";
  f.close();  // a full disk shows up here, not at the write
  if (!f) return Status::Error(path + ": write failed");
  return Status::Ok();
}

}  // namespace mlaserve::cli
