// A drafter's chain after a prompt, through the engine's pieces: the prompt prefilled by the
// runner as a request of its own, the target's greedy next token appended (the request now
// decodes), then one Observe with the target rows the drafter asks for (Drafter::input()).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <span>

#include "engine/cpu_model_runner.h"
#include "engine/drafter.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "kvcache/page_allocator.h"

namespace mlaserve::testing {

// The request (next_drafts: the chain; its KV pages from `allocator`, context 512) and the
// target's greedy token after the prompt. Failures are test failures.
struct ObservedPrompt {
  std::unique_ptr<Request> request;
  TokenId next_token = -1;
};

inline ObservedPrompt PrefillAndObserve(CpuModelRunner& runner, PageAllocator& allocator, Drafter& drafter,
                                        std::span<const TokenId> input_ids, int steps) {
  ObservedPrompt out;
  auto r = std::make_unique<Request>();
  r->spec.input_ids.assign(input_ids.begin(), input_ids.end());
  r->tokens = r->spec.input_ids;
  r->kv = std::make_unique<SequenceKv>(allocator, 512);
  r->next_drafts.reserve(size_t(steps));
  r->draft_limit = steps;  // (the engine sets it at Submit)
  EXPECT_TRUE(r->kv->Reserve(int(input_ids.size())).ok());
  BatchPlan plan;
  plan.Add(r->kv->pages(), 0, input_ids, /*all_logits=*/false);
  plan.return_hidden_states = drafter.input() == DrafterInput::kFinalHidden;
  plan.capture_hidden_states = drafter.input() == DrafterInput::kCapturedLayers;
  auto step = runner.Execute(plan);
  EXPECT_TRUE(step.ok()) << step.error();
  if (!step.ok()) return out;
  r->kv->MarkComputed(int(input_ids.size()));
  out.next_token = ArgMax(step->logits);
  r->tokens.push_back(out.next_token);  // sampled: the request now decodes
  EXPECT_TRUE(r->decoding());
  Request* requests[] = {r.get()};
  const Status observed = drafter.Observe(
      plan, requests,
      drafter.input() == DrafterInput::kFinalHidden ? step->hidden_states : step->captured_hidden_states);
  EXPECT_TRUE(observed.ok()) << observed.message();
  out.request = std::move(r);
  return out;
}

}  // namespace mlaserve::testing
