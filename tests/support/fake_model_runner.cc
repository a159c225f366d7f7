#include "support/fake_model_runner.h"

#include <algorithm>
#include <string>
#include <utility>

namespace mlaserve::testing {

FakeModelRunner::FakeModelRunner(const PageAllocator& pool, int vocab_size, int max_batch_tokens, int max_context)
    : pool_(pool),
      info_{.vocab_size = vocab_size, .hidden_size = 0, .max_batch_tokens = max_batch_tokens,
            .max_context = max_context, .eos_token_id = -1},
      shadow_(size_t(pool.num_pages()) * size_t(pool.page_size()), -1) {}

TokenId FakeModelRunner::NextToken(std::span<const TokenId> context, int vocab_size) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over (position, token)
  for (size_t p = 0; p < context.size(); ++p) {
    h = (h ^ (uint64_t(p) << 32 | uint32_t(context[p]))) * 0x100000001b3ull;
  }
  return TokenId((h >> 17) % uint64_t(vocab_size));
}

std::vector<TokenId> FakeModelRunner::Greedy(std::vector<TokenId> prompt, int max_new) const {
  std::vector<TokenId> out;
  for (int i = 0; i < max_new; ++i) {
    out.push_back(NextToken(prompt, info_.vocab_size));
    prompt.push_back(out.back());
  }
  return out;
}

void FakeModelRunner::ReserveLogitsRows(int max_logits_rows) {
  logits_.assign(size_t(max_logits_rows) * size_t(info_.vocab_size), 0.0f);
}

TokenId& FakeModelRunner::Shadow(std::span<const PageId> page_table, int position) {
  const int page_size = pool_.page_size();
  return shadow_[size_t(page_table[size_t(position / page_size)]) * size_t(page_size) + size_t(position % page_size)];
}

Result<ModelRunnerOutput> FakeModelRunner::Execute(const BatchPlan& plan) {
  if (std::exchange(fail_next_, false)) return Status::Error("the fake runner was told to fail");
  if (plan.num_tokens() > info_.max_batch_tokens) return Status::Error("the plan holds too many tokens");
  if (size_t(plan.num_logits_rows) * size_t(info_.vocab_size) > logits_.size()) {
    return Status::Error("the plan asks for more logits rows than were reserved");
  }
  // Check before writing, as the real runner does: the tables cover the new positions and
  // every earlier position's row was written.
  for (const PlannedSequence& s : plan.sequences) {
    const int end = s.num_computed_tokens + s.num_new_tokens;
    if (s.num_new_tokens <= 0 || end > info_.max_context ||
        int64_t(end) > int64_t(s.page_table.size()) * pool_.page_size()) {
      return Status::Error("a planned sequence is not covered by its page table");
    }
    for (int p = 0; p < s.num_computed_tokens; ++p) {
      if (Shadow(s.page_table, p) < 0) {
        return Status::Error("position " + std::to_string(p) + " is read but was never written");
      }
    }
  }
  std::vector<ExecutedSequence>& step = steps_.emplace_back();
  for (const PlannedSequence& s : plan.sequences) {
    for (int i = 0; i < s.num_new_tokens; ++i) {
      Shadow(s.page_table, s.num_computed_tokens + i) = plan.tokens[size_t(s.first_token + i)];
    }
    step.push_back({s.num_computed_tokens, s.num_new_tokens, s.all_logits});
  }
  const size_t vocab = size_t(info_.vocab_size);
  std::fill(logits_.begin(), logits_.begin() + int64_t(size_t(plan.num_logits_rows) * vocab), 0.0f);
  for (const PlannedSequence& s : plan.sequences) {
    const int end = s.num_computed_tokens + s.num_new_tokens;
    for (int row = 0; row < s.num_logits_rows(); ++row) {
      const int position = s.all_logits ? s.num_computed_tokens + row : end - 1;
      context_.clear();
      for (int p = 0; p <= position; ++p) context_.push_back(Shadow(s.page_table, p));
      logits_[size_t(s.first_logits_row + row) * vocab + size_t(NextToken(context_, info_.vocab_size))] = 10.0f;
    }
  }
  return ModelRunnerOutput{.logits = std::span(logits_).first(size_t(plan.num_logits_rows) * vocab)};
}

}  // namespace mlaserve::testing
