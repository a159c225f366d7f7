// Bookkeeping shared by the loaders: the per-id tables and added-token registration.
#include "tokenizer/tokenizer_model.h"

namespace mlaserve {

void TokenizerModel::SetToken(TokenId id, std::string spelling, std::string raw_bytes) {
  const auto index = static_cast<size_t>(id);
  if (index >= spellings.size()) {
    spellings.resize(index + 1);
    bytes.resize(index + 1);
    is_special.resize(index + 1, 0);
  }
  id_by_spelling.insert_or_assign(spelling, id);
  spellings[index] = std::move(spelling);
  bytes[index] = std::move(raw_bytes);
}

void TokenizerModel::SetAddedTokens(std::vector<AddedToken> tokens) {
  for (const AddedToken& token : tokens) {
    // An added token decodes to its literal text, never through the byte map.
    SetToken(token.id, token.content, token.content);
    is_special[static_cast<size_t>(token.id)] = token.special ? 1 : 0;
  }
  added_tokens = AddedTokenMatcher(std::move(tokens));
}

}  // namespace mlaserve
