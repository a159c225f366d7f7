#include "batch/remote_tokenizer.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace mlaserve::batch {

Result<Tokenizer> FetchTokenizer(const std::string& base_url, const HttpHeaders& headers, int timeout_ms) {
  // Tokenizer::FromDirectory picks the format from which files exist; a private directory
  // holding what the server has keeps that choice in one place.
  std::string dir = (std::filesystem::temp_directory_path() / "mlaserve-tokenizer-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) return Status::Error("cannot create a temporary directory");
  struct RemoveDir {
    const std::string& path;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove_dir{dir};
  HttpClient client;
  int fetched = 0;
  for (std::string_view name : Tokenizer::kFileNames) {
    const std::string url = base_url + "/tokenizer_file/" + std::string(name);
    auto r = client.Request("GET", url, "", headers, timeout_ms);
    if (!r.ok()) return r.status();
    if (r->status_code == 404) continue;
    if (r->status_code != 200) return Status::Error(url + ": HTTP " + std::to_string(r->status_code));
    std::ofstream out(dir + "/" + std::string(name), std::ios::binary);
    out << r->body;
    if (!out) return Status::Error(dir + ": cannot write " + std::string(name));
    ++fetched;
  }
  if (fetched == 0) return Status::Error(base_url + " serves no tokenizer files (GET /tokenizer_file/NAME)");
  return Tokenizer::FromDirectory(dir);
}

}  // namespace mlaserve::batch
