// The seam between scheduling and computing: a ModelRunner executes one BatchPlan and returns
// logits (and, when asked, hidden states). The engine knows only this interface; CpuModelRunner
// (engine/cpu_model_runner.h) is the default, and tests run the engine on a scripted fake.
// Other backends (tensor-parallel workers, a GPU) implement the same three calls.
// Threads: all calls come from the engine thread.
#pragma once

#include <span>

#include "core/status.h"
#include "core/types.h"
#include "engine/batch_plan.h"

namespace mlaserve {

// What the engine needs to know about the model behind a runner.
struct ModelRunnerInfo {
  int vocab_size = 0;          // width of a logits row
  int hidden_size = 0;         // width of a hidden-state row
  int max_batch_tokens = 0;    // most tokens one Execute holds (BatchPlan::num_tokens())
  int max_context = 0;         // longest sequence, in positions
  TokenId eos_token_id = -1;   // the model's own end-of-sequence id; -1: none
  // Width of a captured row (C captured layers * hidden_size, ModelOptions::capture_layers);
  // 0: the model captures nothing.
  int captured_width = 0;
};

// Views into the runner's buffers, valid until the next Execute (or the runner's destruction).
struct ModelRunnerOutput {
  std::span<const float> logits;         // [plan.num_logits_rows, vocab_size], in the plan's row order
  std::span<const float> hidden_states;  // [plan.num_tokens(), hidden_size] when asked, else empty
  // [plan.num_tokens(), captured_width] with plan.capture_hidden_states, else empty: per token,
  // the residual stream entering each captured layer, the layers concatenated in order.
  std::span<const float> captured_hidden_states;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelRunnerInfo& info() const = 0;

  // Sizes the output buffers once, before the first Execute: no plan will ask for more than
  // max_logits_rows rows. (Allocates; Execute never does.)
  virtual void ReserveLogitsRows(int max_logits_rows) = 0;

  // Runs every planned sequence's new tokens: writes their KV rows through the page tables and
  // computes the logits rows the plan asks for. The plan is borrowed for the call; the runner
  // changes no scheduler state (the scheduler records the new positions afterwards). On error
  // no KV row has been written and the output is meaningless.
  [[nodiscard]] virtual Result<ModelRunnerOutput> Execute(const BatchPlan& plan) = 0;
};

}  // namespace mlaserve
