#include "kvcache/radix_cache.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/check.h"

namespace mlaserve {

RadixCache::RadixCache(PageAllocator& allocator)
    : allocator_(allocator),
      page_size_(allocator.page_size()),
      page_tokens_(size_t(allocator.num_pages()) * size_t(allocator.page_size())),
      next_page_(size_t(allocator.num_pages()), kNone),
      page_in_tree_(size_t(allocator.num_pages()), 0) {
  nodes_.push_back(Node{.alive = true});  // the root: the empty prefix, never evicted
}

RadixCache::~RadixCache() {
  for (size_t id = 1; id < nodes_.size(); ++id) {
    if (nodes_[id].alive) FreeChain(nodes_[id].first_page);
  }
}

// ---- Lookup ----

bool RadixCache::PageHolds(PageId page, std::span<const TokenId> tokens) const {
  const TokenId* stored = page_tokens_.data() + size_t(page) * size_t(page_size_);
  return std::equal(stored, stored + page_size_, tokens.begin());
}

uint64_t RadixCache::ChildKey(int32_t parent, TokenId first_token) {
  return (uint64_t(uint32_t(parent)) << 32) | uint64_t(uint32_t(first_token));
}

int32_t RadixCache::FindChild(int32_t parent, std::span<const TokenId> tokens) const {
  auto [begin, end] = children_.equal_range(ChildKey(parent, tokens[0]));
  for (auto it = begin; it != end; ++it) {
    if (PageHolds(nodes_[size_t(it->second)].first_page, tokens)) return it->second;
  }
  return kNone;
}

PageId RadixCache::Advance(PageId page, int32_t steps) const {
  for (int32_t i = 0; i < steps; ++i) page = next_page_[size_t(page)];
  return page;
}

RadixCache::MatchResult RadixCache::MatchPrefix(std::span<const TokenId> tokens,
                                                int64_t max_tokens) const {
  const int64_t limit_pages = std::clamp<int64_t>(max_tokens, 0, int64_t(tokens.size())) / page_size_;
  auto page_tokens = [&](int64_t page_idx) {
    return tokens.subspan(size_t(page_idx) * size_t(page_size_), size_t(page_size_));
  };
  MatchResult result;
  int32_t node = kRoot;
  int64_t page_idx = 0;
  while (page_idx < limit_pages) {
    const int32_t child = FindChild(node, page_tokens(page_idx));
    if (child == kNone) break;
    node = child;
    const Node& edge = nodes_[size_t(child)];
    int32_t matched_pages = 0;
    for (PageId p = edge.first_page;
         p != kNone && page_idx < limit_pages && PageHolds(p, page_tokens(page_idx));
         p = next_page_[size_t(p)]) {
      result.pages.push_back(p);
      ++page_idx;
      ++matched_pages;
    }
    if (matched_pages < edge.num_pages) break;  // the match ends inside this edge
  }
  result.num_tokens = page_idx * page_size_;
  result.node = NodeHandle{.node = node, .generation = nodes_[size_t(node)].generation};
  return result;
}

// ---- Locks ----

void RadixCache::CheckHandle(NodeHandle handle) const {
  MLA_CHECK(handle.node >= 0 && size_t(handle.node) < nodes_.size());
  const Node& n = nodes_[size_t(handle.node)];
  MLA_CHECK(n.alive && n.generation == handle.generation);
}

void RadixCache::Lock(NodeHandle handle) {
  CheckHandle(handle);
  const uint64_t tick = ++clock_;
  for (int32_t id = handle.node; id != kRoot; id = nodes_[size_t(id)].parent) {
    Node& n = nodes_[size_t(id)];
    if (n.lock_count == 0) {
      Unlist(id);
      evictable_pages_ -= n.num_pages;
      locked_pages_ += n.num_pages;
    }
    ++n.lock_count;
    n.last_access = tick;
  }
}

void RadixCache::Unlock(NodeHandle handle) {
  CheckHandle(handle);
  for (int32_t id = handle.node; id != kRoot; id = nodes_[size_t(id)].parent) {
    Node& n = nodes_[size_t(id)];
    MLA_CHECK(n.lock_count > 0);
    if (--n.lock_count == 0) {
      locked_pages_ -= n.num_pages;
      evictable_pages_ += n.num_pages;
      ListIfEvictable(id);
    }
  }
}

// ---- LRU list ----

void RadixCache::Unlist(int32_t id) {
  Node& n = nodes_[size_t(id)];
  if (!n.in_lru) return;
  lru_leaves_.erase({n.last_access, id});
  n.in_lru = false;
}

void RadixCache::ListIfEvictable(int32_t id) {
  Node& n = nodes_[size_t(id)];
  if (id == kRoot || !n.alive || n.in_lru || n.num_children > 0 || n.lock_count > 0) return;
  lru_leaves_.insert({n.last_access, id});
  n.in_lru = true;
}

void RadixCache::Touch(int32_t id, uint64_t tick) {
  Unlist(id);
  nodes_[size_t(id)].last_access = tick;
  ListIfEvictable(id);
}

// ---- Tree structure ----

int32_t RadixCache::NewNode() {
  int32_t id;
  if (free_nodes_.empty()) {
    id = int32_t(nodes_.size());
    nodes_.push_back(Node{});
  } else {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  }
  Node& n = nodes_[size_t(id)];
  n = Node{.generation = n.generation, .alive = true};
  return id;
}

void RadixCache::FreeNode(int32_t id) {
  Node& n = nodes_[size_t(id)];
  n = Node{.generation = n.generation + 1};  // handles to this slot are stale from now on
  free_nodes_.push_back(id);
}

void RadixCache::AddChild(int32_t parent, int32_t child) {
  const PageId first_page = nodes_[size_t(child)].first_page;
  children_.emplace(ChildKey(parent, page_tokens_[size_t(first_page) * size_t(page_size_)]), child);
  ++nodes_[size_t(parent)].num_children;
}

void RadixCache::RemoveChild(int32_t parent, int32_t child) {
  const PageId first_page = nodes_[size_t(child)].first_page;
  auto [begin, end] =
      children_.equal_range(ChildKey(parent, page_tokens_[size_t(first_page) * size_t(page_size_)]));
  auto it = std::find_if(begin, end, [child](const auto& entry) { return entry.second == child; });
  MLA_CHECK(it != end);
  children_.erase(it);
  --nodes_[size_t(parent)].num_children;
}

int32_t RadixCache::Split(int32_t id, int32_t num_pages) {
  MLA_CHECK(num_pages > 0 && num_pages < nodes_[size_t(id)].num_pages);
  const int32_t top = NewNode();  // may grow the arena: take references after it
  Node& bottom = nodes_[size_t(id)];
  Node& prefix = nodes_[size_t(top)];
  const int32_t parent = bottom.parent;
  RemoveChild(parent, id);
  // The prefix carries every lock that covers the bottom (locks count the whole subtree) and the
  // same LRU time, so counters and the LRU list need no change: the bottom's state is unchanged
  // and the prefix, having a child, is not a leaf.
  prefix.parent = parent;
  prefix.first_page = bottom.first_page;
  prefix.num_pages = num_pages;
  prefix.lock_count = bottom.lock_count;
  prefix.last_access = bottom.last_access;
  const PageId last_prefix_page = Advance(bottom.first_page, num_pages - 1);
  bottom.first_page = next_page_[size_t(last_prefix_page)];
  next_page_[size_t(last_prefix_page)] = kNone;
  bottom.num_pages -= num_pages;
  bottom.parent = top;
  AddChild(parent, top);
  AddChild(top, id);
  return top;
}

// ---- Page ownership ----

void RadixCache::AdoptPage(PageId page, std::span<const TokenId> page_tokens) {
  MLA_CHECK(page >= 0 && page < allocator_.num_pages());
  MLA_CHECK(!page_in_tree_[size_t(page)]);  // the same page given twice would be freed twice
  page_in_tree_[size_t(page)] = 1;
  std::copy(page_tokens.begin(), page_tokens.end(),
            page_tokens_.begin() + ptrdiff_t(size_t(page) * size_t(page_size_)));
  next_page_[size_t(page)] = kNone;
}

void RadixCache::DropDuplicate(PageId given_page, PageId tree_page) {
  if (given_page == tree_page) return;  // a borrowed prefix page: already the tree's own
  MLA_CHECK(given_page >= 0 && given_page < allocator_.num_pages());
  MLA_CHECK(!page_in_tree_[size_t(given_page)]);  // a tree page at another position: a bug
  allocator_.Free(given_page);
}

void RadixCache::FreeChain(PageId page) {
  while (page != kNone) {
    const PageId next = next_page_[size_t(page)];
    next_page_[size_t(page)] = kNone;
    page_in_tree_[size_t(page)] = 0;
    allocator_.Free(page);
    page = next;
  }
}

int64_t RadixCache::Insert(std::span<const TokenId> tokens, std::span<const PageId> pages) {
  MLA_CHECK(tokens.size() % size_t(page_size_) == 0);
  MLA_CHECK(pages.size() * size_t(page_size_) == tokens.size());
  auto page_tokens = [&](int64_t page_idx) {
    return tokens.subspan(size_t(page_idx) * size_t(page_size_), size_t(page_size_));
  };
  const int64_t total_pages = int64_t(pages.size());
  const uint64_t tick = ++clock_;

  // Walk the part the tree already holds, dropping the given copies of its pages.
  int32_t node = kRoot;
  int64_t page_idx = 0;
  while (page_idx < total_pages) {
    int32_t child = FindChild(node, page_tokens(page_idx));
    if (child == kNone) break;
    const int32_t edge_pages = nodes_[size_t(child)].num_pages;
    int32_t matched_pages = 0;
    for (PageId p = nodes_[size_t(child)].first_page;
         p != kNone && page_idx < total_pages && PageHolds(p, page_tokens(page_idx));
         p = next_page_[size_t(p)]) {
      DropDuplicate(pages[size_t(page_idx)], p);
      ++page_idx;
      ++matched_pages;
    }
    if (matched_pages < edge_pages) child = Split(child, matched_pages);
    Touch(child, tick);
    node = child;
    if (matched_pages < edge_pages) break;  // what is left diverges here
  }

  // The rest becomes one new leaf under `node`.
  const int64_t new_pages = total_pages - page_idx;
  if (new_pages == 0) return 0;
  for (int64_t i = page_idx; i < total_pages; ++i) {
    AdoptPage(pages[size_t(i)], page_tokens(i));
    if (i > page_idx) next_page_[size_t(pages[size_t(i - 1)])] = pages[size_t(i)];
  }
  const int32_t leaf = NewNode();
  Node& n = nodes_[size_t(leaf)];
  n.parent = node;
  n.first_page = pages[size_t(page_idx)];
  n.num_pages = int32_t(new_pages);
  n.last_access = tick;
  Unlist(node);  // no longer a leaf
  AddChild(node, leaf);
  evictable_pages_ += new_pages;  // locks cover ancestors, never a new leaf
  ListIfEvictable(leaf);
  return new_pages;
}

// ---- Eviction ----

int64_t RadixCache::Evict(int64_t num_pages) {
  int64_t freed_pages = 0;
  while (freed_pages < num_pages && !lru_leaves_.empty()) {
    const int32_t id = lru_leaves_.begin()->second;
    Node& leaf = nodes_[size_t(id)];
    const int64_t wanted_pages = num_pages - freed_pages;
    if (wanted_pages < leaf.num_pages) {
      // Only part of the leaf is needed: drop its tail; the front is what a match reaches first.
      const int32_t kept_pages = leaf.num_pages - int32_t(wanted_pages);
      const PageId last_kept = Advance(leaf.first_page, kept_pages - 1);
      FreeChain(next_page_[size_t(last_kept)]);
      next_page_[size_t(last_kept)] = kNone;
      leaf.num_pages = kept_pages;
      ++leaf.generation;  // an unlocked MatchResult over it may name freed pages: make it stale
      evictable_pages_ -= wanted_pages;
      freed_pages += wanted_pages;
      break;
    }
    const int32_t parent = leaf.parent;
    Unlist(id);
    RemoveChild(parent, id);  // before FreeChain: the child key is read from the first page
    FreeChain(leaf.first_page);
    evictable_pages_ -= leaf.num_pages;
    freed_pages += leaf.num_pages;
    FreeNode(id);
    ListIfEvictable(parent);
  }
  return freed_pages;
}

Status RadixCache::Reset() {
  if (locked_pages_ > 0) {
    return Status::Error("radix cache not flushed: " + std::to_string(locked_pages_) +
                         " pages are locked by running requests");
  }
  Evict(std::numeric_limits<int64_t>::max());
  MLA_CHECK(cached_pages() == 0 && num_nodes() == 0);
  return Status::Ok();
}

}  // namespace mlaserve
