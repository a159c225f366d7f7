// Kimi-K2's tiktoken vocabulary as byte-level BPE files carry it (llama.cpp's converter writing
// GGUF's tokenizer.ggml.*, transformers' TikTokenConverter alike): the ranks spelled with GPT-2's
// byte characters in id order, and one merge per token, the cut of it that tiktoken's own merging
// reaches last. (tiktoken itself merges any two adjacent parts whose concatenation is a token;
// tokenizer/tiktoken_file.cc loads it so, with every cut of every token.)
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace mlaserve {

// From single bytes, repeatedly merge the adjacent pair whose concatenation has the lowest rank
// (leftmost on a tie) below token_rank: the two parts that leaves, or empty when it does not end
// in two (the token is not reachable by merges).
std::vector<std::string> LastTiktokenCut(const std::string& token, int64_t token_rank,
                                         const std::unordered_map<std::string, int64_t>& rank_of);

// tokens[id] (spellings), types[id] (GGUF's: 1 normal, 3 control for the specials) for the ids
// below vocab_size that `tokenizer` (a Kimi tiktoken one) defines, and the merges ("a b",
// spelled byte-level) in rank order. tokens and types are sized vocab_size by the caller; ids it
// does not define are left as they are.
void TiktokenByteLevelVocab(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<std::string>& tokens,
                            std::vector<int32_t>& types, std::vector<std::string>& merges);

}  // namespace mlaserve
