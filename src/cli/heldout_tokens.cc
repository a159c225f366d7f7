#include "cli/heldout_tokens.h"

#include <filesystem>

#include "core/read_file.h"

namespace mlaserve::cli {

Result<HeldoutTokens> ReadHeldoutTokens(const std::string& model_path, const std::string& data_arg,
                                        const Tokenizer& tokenizer, int min_tokens) {
  HeldoutTokens out;
  out.path = data_arg.empty() ? (std::filesystem::path(model_path) / "heldout.txt").string() : data_arg;
  auto text = ReadWholeFile(out.path);
  if (!text.ok()) return Status::Error(text.error() + " (give held-out text with --data)");
  auto encoded = tokenizer.Encode(*text, /*add_bos=*/false);
  if (!encoded.ok()) return encoded.status();
  out.ids = std::move(encoded).value();
  if (int(out.ids.size()) < min_tokens) return Status::Error(out.path + ": fewer tokens than --window");
  return out;
}

}  // namespace mlaserve::cli
