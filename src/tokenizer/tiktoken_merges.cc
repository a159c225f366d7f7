#include "tokenizer/tiktoken_merges.h"

#include <unordered_map>

#include "tokenizer/byte_level.h"

namespace mlaserve {

std::vector<std::string> LastTiktokenCut(const std::string& token, int64_t token_rank,
                                         const std::unordered_map<std::string, int64_t>& rank_of) {
  std::vector<std::string> parts;
  for (char byte : token) parts.emplace_back(1, byte);
  while (parts.size() > 2) {
    size_t best = parts.size();
    int64_t best_rank = token_rank;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = rank_of.find(parts[i] + parts[i + 1]);
      if (it != rank_of.end() && it->second < best_rank) best = i, best_rank = it->second;
    }
    if (best == parts.size()) return {};
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + ptrdiff_t(best) + 1);
  }
  return parts.size() == 2 ? parts : std::vector<std::string>{};
}

void TiktokenByteLevelVocab(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<std::string>& tokens,
                            std::vector<int32_t>& types, std::vector<std::string>& merges) {
  std::unordered_map<std::string, int64_t> rank_of;
  for (int64_t id = 0; id < vocab_size; ++id) {
    if (!tokenizer.IsSpecial(TokenId(id)) && !tokenizer.TokenBytes(TokenId(id)).empty()) {
      rank_of.insert_or_assign(std::string(tokenizer.TokenBytes(TokenId(id))), id);  // as the loader: the last wins
    }
  }
  for (int64_t id = 0; id < vocab_size; ++id) {
    const std::string spelling = tokenizer.IdToToken(TokenId(id));
    if (spelling.empty()) continue;
    tokens[size_t(id)] = spelling;
    if (tokenizer.IsSpecial(TokenId(id))) {
      types[size_t(id)] = 3;
      continue;
    }
    types[size_t(id)] = 1;
    const std::string bytes(tokenizer.TokenBytes(TokenId(id)));
    if (bytes.size() < 2) continue;
    const std::vector<std::string> cut = LastTiktokenCut(bytes, id, rank_of);
    if (cut.empty()) continue;
    std::string merge;
    AppendByteLevelSpelling(cut[0], &merge);
    merge += ' ';
    AppendByteLevelSpelling(cut[1], &merge);
    merges.push_back(std::move(merge));
  }
}

}  // namespace mlaserve
