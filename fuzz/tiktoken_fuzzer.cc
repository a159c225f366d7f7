// Kimi-K2's tiktoken tokenizer files (tokenizer/tiktoken_file.cc): the input is tiktoken.model,
// a NUL, tokenizer_config.json, a NUL, then a text. The two files are written to a directory in
// /dev/shm and loaded as the server loads a model directory (the only entry point that builds a
// whole Tokenizer from them); a tokenizer that loads encodes and decodes the text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = mlaserve::fuzz::SplitParts(mlaserve::fuzz::AsText(data, size), 3);
  mlaserve::fuzz::WriteScratchFile("tiktoken.model", parts[0]);
  mlaserve::fuzz::WriteScratchFile("tokenizer_config.json", parts[1]);
  auto tokenizer = mlaserve::Tokenizer::FromDirectory(mlaserve::fuzz::ScratchDir());
  if (!tokenizer.ok()) return 0;
  auto ids = tokenizer->Encode(parts[2], /*add_bos=*/false);
  if (!ids.ok()) return 0;
  (void)tokenizer->Decode(*ids, /*skip_special_tokens=*/false);
  return 0;
}
