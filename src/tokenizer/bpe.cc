// The fast path keeps the piece as a linked list of symbols and a min-heap of candidate
// merges (rank, left position); stale candidates are skipped when popped. This is the
// algorithm Hugging Face's tokenizers use, and it yields the same ids as the quadratic
// "find the best pair, merge, repeat" loop kept below as the reference.
#include "tokenizer/bpe.h"

#include <algorithm>

namespace mlaserve {
namespace {

// std::push_heap builds a max-heap; ordering by "greater" puts the lowest rank (then the
// leftmost position) on top.
bool LaterCandidate(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
  if (a.rank != b.rank) return a.rank > b.rank;
  return a.left > b.left;
}

}  // namespace

void BpeModel::InitSymbols(std::string_view piece, BpeScratch* scratch) const {
  std::vector<BpeScratch::Symbol>& symbols = scratch->symbols;
  symbols.clear();
  bool previous_was_unknown = false;
  for (char c : piece) {
    const TokenId id = byte_token_ids_[static_cast<unsigned char>(c)];
    if (id >= 0) {
      symbols.push_back({id, -1, -1, 1});
      previous_was_unknown = false;
      continue;
    }
    if (!options_.unk_id) continue;
    if (options_.fuse_unk && previous_was_unknown) {
      ++symbols.back().length;
    } else {
      symbols.push_back({*options_.unk_id, -1, -1, 1});
    }
    previous_was_unknown = true;
  }
  const auto count = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i < count; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = (i + 1 < count) ? i + 1 : -1;
  }
}

void BpeModel::EncodePiece(std::string_view piece, BpeScratch* scratch,
                           std::vector<TokenId>* out) const {
  if (options_.ignore_merges) {
    auto whole = whole_tokens_.find(piece);
    if (whole != whole_tokens_.end()) {
      out->push_back(whole->second);
      return;
    }
  }
  InitSymbols(piece, scratch);
  std::vector<BpeScratch::Symbol>& symbols = scratch->symbols;
  if (symbols.empty()) return;

  std::vector<BpeScratch::Candidate>& heap = scratch->heap;
  heap.clear();
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeRule* rule = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      heap.push_back({rule->rank, static_cast<int32_t>(i), rule->merged});
    }
  }
  std::make_heap(heap.begin(), heap.end(), LaterCandidate);

  auto push_candidate = [&](int32_t left_index) {
    const int32_t right_index = symbols[left_index].next;
    if (const MergeRule* rule = FindMerge(symbols[left_index].id, symbols[right_index].id)) {
      heap.push_back({rule->rank, left_index, rule->merged});
      std::push_heap(heap.begin(), heap.end(), LaterCandidate);
    }
  };

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), LaterCandidate);
    const BpeScratch::Candidate candidate = heap.back();
    heap.pop_back();

    BpeScratch::Symbol& left = symbols[candidate.left];
    if (left.length == 0 || left.next < 0) continue;  // merged away, or now last
    BpeScratch::Symbol& right = symbols[left.next];
    // The pair may have changed since the candidate was queued.
    const MergeRule* rule = FindMerge(left.id, right.id);
    if (rule == nullptr || rule->merged != candidate.merged || rule->rank != candidate.rank) {
      continue;
    }

    left.id = candidate.merged;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = candidate.left;

    if (left.prev >= 0) push_candidate(left.prev);
    if (left.next >= 0) push_candidate(candidate.left);
  }

  // Symbol 0 has no left neighbour, so it is never merged away.
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

void BpeModel::EncodePieceReference(std::string_view piece, std::vector<TokenId>* out) const {
  if (options_.ignore_merges) {
    auto whole = whole_tokens_.find(piece);
    if (whole != whole_tokens_.end()) {
      out->push_back(whole->second);
      return;
    }
  }
  BpeScratch scratch;
  InitSymbols(piece, &scratch);
  std::vector<TokenId> ids;
  for (const BpeScratch::Symbol& symbol : scratch.symbols) ids.push_back(symbol.id);

  while (ids.size() > 1) {
    size_t best_index = 0;
    const MergeRule* best = nullptr;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const MergeRule* rule = FindMerge(ids[i], ids[i + 1]);
      if (rule != nullptr && (best == nullptr || rule->rank < best->rank)) {
        best = rule;
        best_index = i;
      }
    }
    if (best == nullptr) break;
    ids[best_index] = best->merged;
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best_index) + 1);
  }
  out->insert(out->end(), ids.begin(), ids.end());
}

}  // namespace mlaserve
