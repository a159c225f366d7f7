// Streaming UTF-8 assembly over token bytes, using the same scanner as Tokenizer::Decode.
#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace mlaserve {

std::string StreamDecoder::Push(TokenId id) {
  if (skip_special_tokens_ && tokenizer_.IsSpecial(id)) return {};
  const std::string_view token_bytes = tokenizer_.TokenBytes(id);

  // Scan the held-back prefix and the new bytes as one run; without a prefix, scan in place.
  std::string_view input = token_bytes;
  if (!pending_.empty()) {
    pending_.append(token_bytes);
    input = pending_;
  }
  std::string text;
  text.reserve(input.size());
  size_t pos = 0;
  while (pos < input.size()) {
    const Utf8Step step = ScanUtf8(input.substr(pos));
    if (step.kind == Utf8Kind::kIncomplete) break;  // wait for the next token
    if (step.kind == Utf8Kind::kValid) {
      text.append(input.data() + pos, step.length);
    } else {
      text.append(kUtf8Replacement);
    }
    pos += step.length;
  }
  if (input.data() == pending_.data()) {
    pending_.erase(0, pos);
  } else {
    pending_.assign(input.substr(pos));
  }
  return text;
}

std::string StreamDecoder::Flush() {
  std::string text;
  AppendUtf8Lossy(pending_, &text);
  pending_.clear();
  return text;
}

}  // namespace mlaserve
