// Hugging Face tokenizer files (tokenizer/hf_tokenizer_json.cc, tokenizer_config.cc): the input
// is tokenizer.json, a NUL, tokenizer_config.json, a NUL, then a text. A tokenizer that loads
// encodes the text, and decoding what it encoded gives valid UTF-8 back.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = mlaserve::fuzz::SplitParts(mlaserve::fuzz::AsText(data, size), 3);
  auto tokenizer = mlaserve::Tokenizer::FromJsonText(parts[0], parts[1]);
  if (!tokenizer.ok()) return 0;
  auto ids = tokenizer->Encode(parts[2], /*add_bos=*/true);
  if (!ids.ok()) return 0;
  (void)tokenizer->Decode(*ids, /*skip_special_tokens=*/false);
  (void)tokenizer->Decode(*ids, /*skip_special_tokens=*/true);
  for (mlaserve::TokenId id : *ids) {
    (void)tokenizer->TokenBytes(id);
    (void)tokenizer->TokenToId(tokenizer->IdToToken(id));
  }
  return 0;
}
