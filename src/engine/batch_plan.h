// One engine step's decision as plain data: which sequences run, which of their tokens are new
// this step and at which positions, where their KV rows live, and which rows need logits.
// The scheduler (engine/scheduler.h) writes it; a ModelRunner (engine/model_runner.h) executes it.
// There are no phases: every sequence has num_computed_tokens (positions whose KV rows exist) and
// is granted num_new_tokens this step, so a prefill chunk, a decode token and draft tokens to
// verify are the same thing: a verify sequence is the last sampled token followed by its
// num_draft_tokens drafts, with a logits row for each.
// Ownership: the scheduler owns the plan and reuses its buffers (no allocation per step once
// they have grown). The page tables are views into the scheduler's sequences: a plan is valid
// until the scheduler's next Schedule or Release, and a runner must not keep it past Execute.
#pragma once

#include <span>
#include <vector>

#include "core/types.h"
#include "kvcache/page_allocator.h"

namespace mlaserve {

struct PlannedSequence {
  // Position p's KV row is row (p % page_size) of page page_table[p / page_size]; the table
  // covers [0, num_computed_tokens + num_new_tokens) (the scheduler reserved the new pages).
  std::span<const PageId> page_table;
  int num_computed_tokens = 0;  // positions [0, num_computed_tokens) already have KV rows
  int num_new_tokens = 0;       // run this step, at positions [num_computed_tokens, + num_new_tokens)
  int first_token = 0;          // its new tokens: BatchPlan::tokens[first_token, + num_new_tokens)
  int first_logits_row = 0;     // its first row of the runner's logits
  bool all_logits = false;      // a logits row per new token (prompt logprobs, drafts), else the last only
  int num_draft_tokens = 0;     // the last of its new tokens are drafts to verify (all_logits then)

  int num_logits_rows() const { return all_logits ? num_new_tokens : 1; }
  std::span<const TokenId> drafts(std::span<const TokenId> plan_tokens) const {
    return plan_tokens.subspan(size_t(first_token + num_new_tokens - num_draft_tokens), size_t(num_draft_tokens));
  }
};

struct BatchPlan {
  std::vector<TokenId> tokens;             // [num_tokens] every sequence's new tokens, in order
  std::vector<PlannedSequence> sequences;  // decodes first, then prefill chunks
  int num_logits_rows = 0;                 // sum of the sequences' num_logits_rows()
  bool return_hidden_states = false;       // the runner also returns every token's final-normed hidden state
  bool capture_hidden_states = false;      // ... and every token's captured layer rows (ModelRunnerInfo::captured_width)

  int num_tokens() const { return int(tokens.size()); }
  bool empty() const { return sequences.empty(); }
  void Clear() {
    tokens.clear();
    sequences.clear();
    num_logits_rows = 0;
    return_hidden_states = false;
    capture_hidden_states = false;
  }
  // Appends a sequence's new tokens, then its drafts (which need every logits row); the plan
  // assigns its token and logits offsets.
  void Add(std::span<const PageId> page_table, int num_computed_tokens, std::span<const TokenId> new_tokens,
           bool all_logits, std::span<const TokenId> drafts = {}) {
    PlannedSequence s{.page_table = page_table,
                      .num_computed_tokens = num_computed_tokens,
                      .num_new_tokens = int(new_tokens.size() + drafts.size()),
                      .first_token = int(tokens.size()),
                      .first_logits_row = num_logits_rows,
                      .all_logits = all_logits || !drafts.empty(),
                      .num_draft_tokens = int(drafts.size())};
    tokens.insert(tokens.end(), new_tokens.begin(), new_tokens.end());
    tokens.insert(tokens.end(), drafts.begin(), drafts.end());
    num_logits_rows += s.num_logits_rows();
    sequences.push_back(s);
  }
};

}  // namespace mlaserve
