// The MTP (NEXTN) layer's forward pass: DeepSeek-V3's multi-token-prediction module used as a
// draft model. Per token i at position p (docs/architecture.md, "MTP drafts"):
//   x_i = eh_proj([enorm(embed(t_{p+1})) | hnorm(h_p)])          [2H] -> [H]
//   y   = decoder block (its own latent cache, one layer, positions as the target's)
//   g_i = shared_head.norm(y_i);  logits_i = lm_head(g_i)         predicts t_{p+2}
// where h_p is the target's final-normed hidden state (or the MTP's own g for a chained draft).
#include "model/model.h"

namespace mlaserve {

Status Model::ForwardMtp(const KernelSet& kernels, KvStorage& mtp_kv, std::span<const TokenId> tokens,
                         std::span<const float> prev_hidden, std::span<const ForwardSegment> segments,
                         LogitsMode mode, float* logits) {
  if (!weights_.has_mtp) return Status::Error("the model was loaded without its MTP layer");
  const ComputeContext ctx{&kernels, &pool_, workspace_.gemm_activations};
  const ModelConfig& c = config_;
  Workspace& ws = workspace_;
  const MtpWeights& mtp = weights_.mtp;
  const int n = int(tokens.size());
  const int64_t H = c.hidden_size;
  if (n == 0) return Status::Ok();
  if (prev_hidden.size() != size_t(n) * size_t(H)) {
    return Status::Error("MTP forward: " + std::to_string(prev_hidden.size()) + " hidden values for " +
                         std::to_string(n) + " tokens of width " + std::to_string(H));
  }
  MLA_RETURN_IF_ERROR(CheckForwardCall(mtp_kv, 1, tokens, segments));
  const KvHostRows kv_rows = mtp_kv.HostRows();
  const KernelSet& k = *ctx.kernels;
  const double eps = c.rms_norm_eps;

  Embed(k, tokens);
  ForTokenRanges(n, [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      float* in = ws.mtp_input.data() + t * 2 * H;  // [enorm(embed) | hnorm(h)]
      k.rms_norm(ws.hidden.data() + t * H, mtp.enorm.data(), H, eps, in);
      k.rms_norm(prev_hidden.data() + t * H, mtp.hnorm.data(), H, eps, in + H);
    }
  });
  MatMul(ctx, ws.mtp_input.data(), n, mtp.eh_proj, ws.hidden.data());
  ForTokenRanges(n, [&](int begin, int end, int) {
    for (int t = begin; t < end; ++t) {
      k.rms_norm(ws.hidden.data() + t * H, mtp.block.input_norm.data(), H, eps, ws.normed.data() + t * H);
    }
  });
  DecoderLayer(ctx, kv_rows, mtp.block, 0, n, segments, nullptr);
  const int num_out = NormOutputRows(k, mtp.head_norm.data(), n, segments, mode);
  if (num_out > 0) MatMul(ctx, ws.last_hidden.data(), num_out, weights_.lm_head, logits);
  return Status::Ok();
}

}  // namespace mlaserve
