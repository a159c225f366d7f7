// The checkpoint's MTP (NEXTN) layer as a DraftModel (model/draft_model.h): Model::ForwardMtp
// over a one-layer latent cache at the engine's page ids, its greedy token over the full
// vocabulary. The rows it reads and returns are final-normed hidden states (the target's, then
// its own shared_head-normed ones).
#pragma once

#include <vector>

#include "kernels/kernels.h"
#include "kvcache/kv_storage.h"
#include "model/draft_model.h"
#include "model/model.h"

namespace mlaserve {

class MtpDraft final : public DraftModel {
 public:
  // model must have its MTP layer (Model::has_mtp); model, kernels and mtp_kv (one layer, the
  // engine storage's page_size and num_pages) are borrowed and must outlive this.
  MtpDraft(Model& model, const KernelSet& kernels, KvStorage& mtp_kv);

  TargetRows target_rows() const override { return TargetRows::kFinalHidden; }
  int target_width() const override { return int(model_.config().hidden_size); }
  int hidden_size() const override { return int(model_.config().hidden_size); }
  // (from_target does not change the MTP's input: both kinds of row are final-normed.)
  Status Forward(std::span<const TokenId> tokens, std::span<const float> inputs, bool from_target,
                 std::span<const ForwardSegment> segments, std::span<TokenId> drafts,
                 std::span<float> out_hidden) override;

 private:
  Model& model_;
  const KernelSet& kernels_;
  KvStorage& mtp_kv_;
  std::vector<float> logits_;  // [drafting segments, vocab], grown to the most one step holds
};

}  // namespace mlaserve
