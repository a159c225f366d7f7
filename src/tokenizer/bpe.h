// Byte-level BPE: turns one pre-tokenized piece (raw bytes) into token ids by repeatedly
// merging the adjacent pair with the lowest merge rank (leftmost first on ties). The merge
// table is keyed by token-id pairs, so no strings are built while encoding.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/types.h"

namespace mlaserve {

struct MergeRule {
  int32_t rank;    // lower merges first (the line number in the merges list)
  TokenId merged;  // the token the pair becomes
};

// Transparent hashing so maps keyed by std::string can be searched with a string_view.
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};
using TokenIdByBytes = std::unordered_map<std::string, TokenId, StringViewHash, std::equal_to<>>;

struct BpeOptions {
  // Hugging Face's ignore_merges / tiktoken's shortcut: a piece that is itself a vocabulary
  // token is emitted whole, without running merges.
  bool ignore_merges = false;
  // Bytes without a single-byte token become this id (consecutive ones fused when fuse_unk);
  // without an unk token they are dropped, as Hugging Face does.
  std::optional<TokenId> unk_id;
  bool fuse_unk = false;
};

// Reused between pieces of one Encode call.
struct BpeScratch {
  struct Symbol {
    TokenId id;
    int32_t prev;     // index of the previous live symbol, -1 at the start
    int32_t next;     // index of the next live symbol, -1 at the end
    uint32_t length;  // bytes covered; 0 once merged into its left neighbour
  };
  struct Candidate {
    int32_t rank;
    int32_t left;  // symbol index of the pair's left side
    TokenId merged;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BpeModel {
 public:
  BpeModel() = default;
  // byte_token_ids[b]: the token for the single byte b, or -1 if the vocabulary lacks it.
  // whole_tokens: raw bytes -> id of every vocabulary token (used only for ignore_merges).
  BpeModel(std::array<TokenId, 256> byte_token_ids, std::unordered_map<uint64_t, MergeRule> merges,
           TokenIdByBytes whole_tokens, BpeOptions options)
      : byte_token_ids_(byte_token_ids),
        merges_(std::move(merges)),
        whole_tokens_(std::move(whole_tokens)),
        options_(options) {}

  static uint64_t PairKey(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  // Appends the ids for `piece` to *out. O(n log n) in the piece length.
  void EncodePiece(std::string_view piece, BpeScratch* scratch, std::vector<TokenId>* out) const;

  // The plain reference: rescans every pair after each merge, O(n^2). Tests compare the two.
  void EncodePieceReference(std::string_view piece, std::vector<TokenId>* out) const;

  size_t num_merges() const { return merges_.size(); }

 private:
  const MergeRule* FindMerge(TokenId left, TokenId right) const {
    auto it = merges_.find(PairKey(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  // Fills scratch->symbols with one symbol per byte (unknown bytes per BpeOptions).
  void InitSymbols(std::string_view piece, BpeScratch* scratch) const;

  std::array<TokenId, 256> byte_token_ids_{};
  std::unordered_map<uint64_t, MergeRule> merges_;
  TokenIdByBytes whole_tokens_;
  BpeOptions options_;
};

}  // namespace mlaserve
