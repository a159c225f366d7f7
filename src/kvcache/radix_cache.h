// The radix prefix cache: finished requests leave the KV pages of their (prompt + output) in a
// radix tree keyed by token ids, so a later request that starts with the same tokens reuses those
// pages instead of recomputing them (SGLang's RadixCache, at page granularity).
//
// Granularity: a page holds page_size tokens' rows, and only whole pages are shared, because a
// page that a request would keep writing into cannot be read by another. Keys are therefore
// matched and inserted in multiples of page_size; a match stops at the last whole page shared.
//
// Ownership:
//   - Every page stored in the tree is owned by the cache, which returns it to the allocator when it is
//     evicted, on Reset, or when the cache is destroyed. The allocator must outlive the cache.
//   - Insert takes ownership of the pages it is given (see Insert for the one exception: pages
//     that are already the tree's own, i.e. a prefix the caller borrowed from MatchPrefix).
//   - A request borrows matched pages read-only. They stay valid only while the request holds a
//     lock on the match's node (Lock ... Unlock); locked nodes are never evicted.
// Memory: nodes live in a vector-backed arena addressed by index; each page's tokens live in one
// flat array indexed by PageId and an edge is a chain of pages, so there is no heap object per
// node or per page (the child index and the LRU set allocate an entry per node).
// Not thread-safe: called from the engine thread only, like the allocator.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/types.h"
#include "kvcache/page_allocator.h"

namespace mlaserve {

class RadixCache {
 public:
  // A node of the tree, by arena index. The generation tells a recycled slot from the node the
  // handle was taken for; using a stale handle is a check failure, never a silent corruption.
  struct NodeHandle {
    int32_t node = 0;  // 0 is the root: the empty prefix
    uint32_t generation = 0;
  };

  struct MatchResult {
    std::vector<PageId> pages;  // [num_tokens / page_size], in prefix order
    int64_t num_tokens = 0;     // a multiple of page_size
    // The node whose edge holds the last matched page (the root when nothing matched). Locking it
    // protects every matched page; if the match ends inside the edge, the rest of that edge is
    // protected too.
    NodeHandle node;
  };

  // The allocator must outlive the cache. Allocates page-indexed side tables once: 4 bytes per
  // token (the tokens of cached pages) and 5 per page.
  explicit RadixCache(PageAllocator& allocator);
  // Returns every cached page to the allocator; no request may still be reading a borrowed prefix.
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  // The longest cached prefix of tokens[0, min(tokens.size(), max_tokens)), in whole pages.
  // Pass max_tokens = tokens.size() - 1 for SGLang's rule that at least one token of a prompt
  // is computed (its logits are needed); pass tokens.size() to match all of it.
  // Does not mutate the tree (not even LRU times: Lock bumps those). The returned pages and handle
  // stay valid only while the node is locked; lock before the next Insert/Evict/Reset. Without a
  // lock an Insert keeps them valid, an Evict or Reset may not.
  [[nodiscard]] MatchResult MatchPrefix(std::span<const TokenId> tokens, int64_t max_tokens) const;

  // Adds one reference on the node and all its ancestors (up to the root) and marks them as
  // used now for LRU. Locking the root handle is a no-op. The handle must be current.
  void Lock(NodeHandle node);
  // Drops the reference Lock added. Unlocking more often than locking is a check failure.
  void Unlock(NodeHandle node);

  // Caches `pages`, which hold the KV rows of `tokens`:
  //   tokens.size() % page_size == 0, pages.size() == tokens.size() / page_size.
  // Ownership of every given page passes to the cache. Where the tree already holds the same
  // tokens (a prefix cached earlier, or a duplicate another request computed at the same time),
  // the given page is returned to the allocator rather than stored twice - unless it *is* the tree's
  // page at that position (a borrowed prefix from MatchPrefix), which is left alone. Splits edges
  // as needed; bumps the LRU time of the whole path. Returns the number of pages adopted into
  // the tree. Handles of existing nodes stay valid (a split keeps the deeper half's id).
  int64_t Insert(std::span<const TokenId> tokens, std::span<const PageId> pages);

  // Frees up to num_pages pages, taking from the least recently used unlocked leaf first (its
  // tail pages first when only part of it is needed); a parent left without children becomes an
  // evictable leaf in turn. Returns how many pages went back to the allocator: min(num_pages,
  // evictable_pages()), since every unlocked node has only unlocked descendants.
  int64_t Evict(int64_t num_pages);

  // flush_cache: returns every cached page to the allocator. Refuses (and changes nothing) while any
  // page is locked, i.e. while a running request borrows a prefix.
  Status Reset();

  int page_size() const { return page_size_; }
  int64_t cached_pages() const { return evictable_pages_ + locked_pages_; }
  int64_t evictable_pages() const { return evictable_pages_; }  // cached and not locked
  int64_t locked_pages() const { return locked_pages_; }
  int64_t cached_tokens() const { return cached_pages() * page_size_; }
  int64_t num_nodes() const { return int64_t(nodes_.size() - free_nodes_.size()) - 1; }  // not root

 private:
  static constexpr int32_t kRoot = 0;
  static constexpr int32_t kNone = -1;

  struct Node {
    int32_t parent = kNone;
    PageId first_page = kNone;  // the edge: num_pages pages chained through next_page_
    int32_t num_pages = 0;
    int32_t num_children = 0;
    int32_t lock_count = 0;  // locks held on this node or any descendant
    uint32_t generation = 0;
    uint64_t last_access = 0;  // logical clock tick of the latest Lock/Insert through the node
    bool alive = false;
    bool in_lru = false;  // listed in lru_leaves_: an unlocked leaf other than the root
  };

  // Whether page's tokens equal tokens[0, page_size).
  bool PageHolds(PageId page, std::span<const TokenId> tokens) const;
  // The child of `parent` whose first page holds tokens[0, page_size), or kNone.
  int32_t FindChild(int32_t parent, std::span<const TokenId> tokens) const;
  static uint64_t ChildKey(int32_t parent, TokenId first_token);
  void AddChild(int32_t parent, int32_t child);
  void RemoveChild(int32_t parent, int32_t child);
  // The page `steps` links after `page` along an edge.
  PageId Advance(PageId page, int32_t steps) const;

  int32_t NewNode();
  void FreeNode(int32_t id);
  // Splits node `id` after its first num_pages pages: a new node takes that prefix and becomes
  // id's parent; id keeps the rest, its children and its handles. Returns the new node.
  int32_t Split(int32_t id, int32_t num_pages);
  // Records that the tree now owns `page`, which holds page_tokens[0, page_size).
  void AdoptPage(PageId page, std::span<const TokenId> page_tokens);
  // Insert's rule for a given page whose tokens the tree already holds in tree_page.
  void DropDuplicate(PageId given_page, PageId tree_page);
  // Returns the pages of a chain, from `page` to its end, to the allocator.
  void FreeChain(PageId page);

  // Keeps lru_leaves_ in step with a node's leaf/lock state and last_access.
  void Unlist(int32_t id);
  void ListIfEvictable(int32_t id);
  void Touch(int32_t id, uint64_t tick);

  void CheckHandle(NodeHandle handle) const;

  PageAllocator& allocator_;
  int page_size_;
  std::vector<Node> nodes_;          // arena; [0] is the root
  std::vector<int32_t> free_nodes_;  // recycled arena slots
  std::vector<TokenId> page_tokens_;  // [num_pages, page_size]: tokens of each page in the tree
  std::vector<PageId> next_page_;     // [num_pages]: next page along the same edge, or kNone
  std::vector<uint8_t> page_in_tree_;  // [num_pages]: catches a page given to the tree twice
  // (parent, first token of the edge) -> child. Siblings whose first pages share the first
  // token (page_size > 1) share the key and are told apart by comparing the whole first page.
  std::unordered_multimap<uint64_t, int32_t> children_;
  // Unlocked leaves by (last_access, node): begin() is the least recently used.
  std::set<std::pair<uint64_t, int32_t>> lru_leaves_;
  uint64_t clock_ = 0;
  int64_t evictable_pages_ = 0;
  int64_t locked_pages_ = 0;
};

}  // namespace mlaserve
