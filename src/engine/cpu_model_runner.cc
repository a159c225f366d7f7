#include "engine/cpu_model_runner.h"

#include <string>

namespace mlaserve {

CpuModelRunner::CpuModelRunner(Model& model, const KernelSet& kernels, KvStorage& kv)
    : model_(model),
      kernels_(kernels),
      kv_(kv),
      info_{.vocab_size = model.config().vocab_size,
            .hidden_size = int(model.config().hidden_size),
            .max_batch_tokens = model.max_batch_tokens(),
            .max_context = model.max_context(),
            .eos_token_id = model.config().eos_token_id,
            .captured_width = model.captured_width()} {}

void CpuModelRunner::ReserveLogitsRows(int max_logits_rows) {
  logits_.resize(size_t(max_logits_rows) * size_t(info_.vocab_size));
  segments_.reserve(size_t(max_logits_rows));  // a sequence has at least one logits row
}

Result<ModelRunnerOutput> CpuModelRunner::Execute(const BatchPlan& plan) {
  if (size_t(plan.num_logits_rows) * size_t(info_.vocab_size) > logits_.size()) {
    return Status::Error("the plan asks for " + std::to_string(plan.num_logits_rows) +
                         " logits rows, more than the runner reserved");
  }
  segments_.clear();
  for (const PlannedSequence& s : plan.sequences) {
    segments_.push_back(ForwardSegment{.pages = s.page_table,
                                       .num_computed_tokens = s.num_computed_tokens,
                                       .num_tokens = s.num_new_tokens,
                                       .all_logits = s.all_logits});
  }
  MLA_RETURN_IF_ERROR(model_.Forward(kernels_, kv_, plan.tokens, segments_, LogitsMode::kLastPerSegment,
                                     logits_.data()));
  ModelRunnerOutput out{.logits = std::span(logits_).first(size_t(plan.num_logits_rows) * size_t(info_.vocab_size))};
  if (plan.return_hidden_states) out.hidden_states = model_.all_hidden_rows(plan.num_tokens());
  if (plan.capture_hidden_states) out.captured_hidden_states = model_.captured_rows(plan.num_tokens());
  return out;
}

}  // namespace mlaserve
