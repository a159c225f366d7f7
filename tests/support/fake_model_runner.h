// A ModelRunner without a model, for scheduler and engine tests: the "model" is a script.
// It keeps no KV bytes, only a shadow indexed by page id that records, for each row it writes,
// the token at that position, and a logits row is one-hot at NextToken(context), where the
// context is what the sequence's page table points at for positions [0, p]. So a plan that
// reads a row nobody wrote fails the Execute, and a page table pointing at the wrong pages (a
// bad radix match, a page reused while still in use) changes the output: the scheduler's bookkeeping is checked
// end to end by comparing outputs with Greedy().
// It also records every plan it executed (ExecutedSequence), and can be told to fail.
#pragma once

#include <span>
#include <vector>

#include "engine/model_runner.h"
#include "kvcache/page_allocator.h"

namespace mlaserve::testing {

class FakeModelRunner final : public ModelRunner {
 public:
  struct ExecutedSequence {
    int num_computed_tokens;
    int num_new_tokens;
    bool all_logits;
  };

  // pool (the scheduler's page ids) must outlive the runner; its page geometry is the shadow's.
  FakeModelRunner(const PageAllocator& pool, int vocab_size, int max_batch_tokens, int max_context);

  // The script: the next token after `context`, a hash of every token and its position.
  static TokenId NextToken(std::span<const TokenId> context, int vocab_size);
  // The tokens a request greedy-decodes alone: prompt, then max_new scripted tokens.
  std::vector<TokenId> Greedy(std::vector<TokenId> prompt, int max_new) const;

  const ModelRunnerInfo& info() const override { return info_; }
  void ReserveLogitsRows(int max_logits_rows) override;
  Result<ModelRunnerOutput> Execute(const BatchPlan& plan) override;

  // Every executed plan's sequences, in order.
  const std::vector<std::vector<ExecutedSequence>>& steps() const { return steps_; }
  // The next Execute returns an error (and writes nothing).
  void FailNextExecute() { fail_next_ = true; }

 private:
  TokenId& Shadow(std::span<const PageId> page_table, int position);

  const PageAllocator& pool_;
  ModelRunnerInfo info_;
  std::vector<TokenId> shadow_;  // [num_pages * page_size]: the token whose row this is; -1 unwritten
  std::vector<float> logits_;    // [max_logits_rows, vocab]
  std::vector<TokenId> context_;
  std::vector<std::vector<ExecutedSequence>> steps_;
  bool fail_next_ = false;
};

}  // namespace mlaserve::testing
