#include "batch/remote_tokenizer.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace mlaserve::batch {

Result<RemoteTokenizer> FetchTokenizer(const std::string& base_url, const HttpHeaders& headers, int timeout_ms,
                                       std::string_view model_type, const std::string& chat_template_file) {
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
  std::vector<std::string_view> names(Tokenizer::kFileNames.begin(), Tokenizer::kFileNames.end());
  names.push_back(kChatTemplateFileName);  // 404 from a server with a built-in format (or an older one)
  for (std::string_view name : names) {
    const std::string url = base_url + "/tokenizer_file/" + std::string(name);
    auto r = client.Request("GET", url, "", headers, timeout_ms);
    if (!r.ok()) return r.status();
    if (r->status_code == 404) continue;
    if (r->status_code != 200) return Status::Error(url + ": HTTP " + std::to_string(r->status_code));
    std::ofstream out(dir + "/" + std::string(name), std::ios::binary);
    out << r->body;
    if (!out) return Status::Error(dir + ": cannot write " + std::string(name));
    fetched += name != kChatTemplateFileName;
  }
  if (fetched == 0) return Status::Error(base_url + " serves no tokenizer files (GET /tokenizer_file/NAME)");
  auto tokenizer = Tokenizer::FromDirectory(dir);
  if (!tokenizer.ok()) return tokenizer.status();
  auto chat_template = ChatTemplate::ForModel(dir, chat_template_file, *tokenizer, model_type);
  if (!chat_template.ok()) return chat_template.status();
  return RemoteTokenizer{std::move(tokenizer).value(), std::move(chat_template).value()};
}

}  // namespace mlaserve::batch
