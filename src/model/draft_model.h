// A draft model for speculative decoding: what engine/model_drafter.h runs to propose a chain of
// tokens (docs/architecture.md, "Speculative decoding"). Two implement it: the checkpoint's own
// MTP layer (model/mtp_draft.h, NEXTN) and a separate EAGLE-3 draft checkpoint
// (model/eagle3_draft.h, EAGLE3).
//
// Every draft model here works the same way: its token i, at position p of its segment, pairs a
// hidden state describing position p with the token at position p + 1, and predicts the token at
// p + 2. The hidden state is either the target model's (a "target row": the first draft of a
// step, and the positions the step made final) or the draft model's own output at position
// p - 1 (a "chained" step). Its cache rows live at the engine's page ids (ForwardSegment::pages),
// in storage the draft model owns or borrows, so the radix cache and page frees carry them along.
// Threads: the engine thread only.
#pragma once

#include <span>

#include "core/status.h"
#include "core/types.h"
#include "model/model.h"

namespace mlaserve {

// Which of the target's rows a draft model's first step reads (the runner returns them).
enum class TargetRows {
  kFinalHidden,     // the final-normed hidden state (Model::all_hidden_rows): MTP
  kCapturedLayers,  // the residual stream entering some layers (Model::captured_rows): EAGLE-3
};

class DraftModel {
 public:
  virtual ~DraftModel() = default;

  virtual TargetRows target_rows() const = 0;
  // Floats per target row the first step reads.
  virtual int target_width() const = 0;
  // Floats per output row (what a chained step reads back).
  virtual int hidden_size() const = 0;

  // One batched forward. tokens [n]: the token after each position; inputs [n, width]: the hidden
  // state at each position, width = target_width() when from_target, else hidden_size() (rows a
  // previous Forward returned). Writes every segment's cache rows; for each segment without
  // no_logits, in segment order, its greedy draft (a target-vocabulary id) to drafts[j] and its
  // last token's output row to out_hidden[j * hidden_size(), ...). Errors leave the caches as
  // they were. Views are read during the call only; inputs may not alias the model's buffers.
  virtual Status Forward(std::span<const TokenId> tokens, std::span<const float> inputs, bool from_target,
                         std::span<const ForwardSegment> segments, std::span<TokenId> drafts,
                         std::span<float> out_hidden) = 0;
};

}  // namespace mlaserve
