// An EAGLE-3 draft checkpoint as a DraftModel (model/draft_model.h; docs/architecture.md,
// "EAGLE-3 drafts"): the layout SpecForge trains and SGLang loads (LlamaForCausalLMEagle3), one
// Llama decoder layer fed by three of the target's layers fused by an fc layer, with its own
// lm_head over a reduced draft vocabulary mapped back to the target's by d2t.
//
// Token i at position p pairs a row a_p with the token t_{p+1}:
//   h   = fc(a_p)              a_p: the target's captured rows [low | mid | high], [3 * H_target]
//                              (a chained step instead feeds back o of the previous position)
//   x   = [input_layernorm(embed(t_{p+1})) | hidden_norm(h)]      [2H], the target's embedding
//   r   = h + o_proj(attention(q_proj(x), k_proj(x), v_proj(x)))  Llama RoPE (pairs i, i + d/2),
//                              causal GQA over the draft's own cache of k and v rows
//   o   = r + down(silu(gate(post_attention_layernorm(r))) * up(...))   the row fed back
//   draft = d2t-mapped argmax of lm_head(norm(o))                   predicts t_{p+2}
//
// The cache: k and v of every position, fp32, per page K^T [kv_heads, head_dim, page_size] then
// V [kv_heads, page_size, head_dim], indexed by the engine's page ids. Weights are packed once at load (F32, BF16 or F16 stored).
// Threads: Forward runs on the target's pool, called from the engine thread only.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/huge_page_buffer.h"
#include "core/status.h"
#include "kernels/kernels.h"
#include "kernels/weight_matrix.h"
#include "model/draft_model.h"
#include "model/model.h"
#include "model/rope.h"

namespace mlaserve {

// SGLang's EAGLE-3 capture default for a target of L layers, as ModelOptions::capture_layers
// indices (the input of layer i): [2, L/2, L-3], i.e. its layer ids [1, L/2 - 1, L - 4] plus one.
// Not checked (it repeats or misorders on shallow targets).
std::vector<int> Eagle3DefaultCaptureLayers(int target_layers);

// config.json of an EAGLE-3 draft directory.
struct Eagle3Config {
  int hidden_size = 0;
  int target_hidden_size = 0;  // "target_hidden_size", else hidden_size
  int intermediate_size = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;            // "head_dim", else hidden_size / num_attention_heads
  int vocab_size = 0;          // the target's vocabulary
  int draft_vocab_size = 0;    // "draft_vocab_size", else vocab_size
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // eagle_config.eagle_aux_hidden_state_layer_ids (SGLang's: the output of decoder layer id);
  // empty: SGLang's default for the target's depth (CaptureLayers).
  std::vector<int> aux_layer_ids;
  size_t checkpoint_bytes = 0;  // its *.safetensors files (the memory budget sets them aside)

  int kv_dim() const { return num_key_value_heads * head_dim; }
  // The cache's bytes per token (k and v, fp32): what the KV budget sets aside.
  size_t kv_bytes_per_token() const { return size_t(2) * size_t(kv_dim()) * sizeof(float); }
  // The target layers whose input rows the draft reads, as ModelOptions::capture_layers indexes
  // them (index i: the residual stream entering layer i): id + 1 for each aux id, or SGLang's
  // default [2, L/2, L-3]. Errors: an index outside [1, L - 1] (SGLang captures the output of
  // layers 0..L-2), or not strictly increasing.
  Result<std::vector<int>> CaptureLayers(int target_layers) const;
};

// Reads and checks DIR/config.json: one line naming the problem (an architecture other than
// LlamaForCausalLMEagle3, rope_scaling, more than one layer, a missing size).
Result<Eagle3Config> ReadEagle3Config(const std::string& dir);

class Eagle3Draft final : public DraftModel {
 public:
  // Loads DIR (config.json, *.safetensors) against the loaded target: the vocabularies, the
  // target's hidden size (the draft shares its embedding, so its own hidden size too) and the
  // target's capture layers (ModelOptions::capture_layers = config.CaptureLayers) must match.
  // The cache holds num_pages pages of page_size rows. target and kernels are borrowed and must
  // outlive the draft.
  static Result<std::unique_ptr<Eagle3Draft>> Load(const std::string& dir, Model& target, const KernelSet& kernels,
                                                   int page_size, int64_t num_pages);

  TargetRows target_rows() const override { return TargetRows::kCapturedLayers; }
  int target_width() const override { return 3 * config_.target_hidden_size; }
  int hidden_size() const override { return config_.hidden_size; }
  Status Forward(std::span<const TokenId> tokens, std::span<const float> inputs, bool from_target,
                 std::span<const ForwardSegment> segments, std::span<TokenId> drafts,
                 std::span<float> out_hidden) override;

  const Eagle3Config& config() const { return config_; }
  // The bytes of the packed weights and of the cache this draft holds.
  size_t weight_bytes() const { return packed_.size(); }
  size_t cache_bytes() const { return kv_floats_ * sizeof(float); }
  // Whether row `row` (< page_size) of page `page` of the cache was ever written:
  // any of its k values non-zero (the cache starts zeroed). For tests.
  bool RowWritten(PageId page, int row) const {
    const float* base = kv_.get() + size_t(page) * page_floats_;
    for (int64_t i = 0; i < config_.kv_dim(); ++i) {
      if (base[size_t(i) * size_t(page_size_) + size_t(row)] != 0.0f) return true;
    }
    return false;
  }
  // The draft vocabulary's target ids (d2t applied), [draft_vocab_size].
  std::span<const TokenId> draft_to_target() const { return draft_to_target_; }
  // The draft logits of the last Forward's drafting segments, [rows, draft_vocab_size] (tests).
  std::span<const float> last_logits(int rows) const {
    return std::span(logits_).first(size_t(rows) * size_t(config_.draft_vocab_size));
  }

 private:
  struct Weights {
    WeightMatrix fc, q_proj, k_proj, v_proj, o_proj, gate, up, down, lm_head;
    std::vector<float> hidden_norm, input_norm, post_attention_norm, norm;  // [H] each
  };

  Eagle3Draft(Eagle3Config config, Model& target, const KernelSet& kernels, int page_size, int64_t num_pages);
  Status CheckCall(std::span<const TokenId> tokens, std::span<const float> inputs, bool from_target,
                   std::span<const ForwardSegment> segments, size_t drafts, size_t out_hidden) const;
  // attn_ rows of the call's n tokens from q_ and the cache (positions_, token_segments_ set):
  // one work item per (token, kv head), its query heads together.
  void Attention(std::span<const ForwardSegment> segments, int n);
  // The cache page holding `position`: K transposed, [kv_heads][head_dim][page_size], then V,
  // [kv_heads][page_size][head_dim] (so a query group's scores over a page and its weighted sum
  // of values are each one gemm_f32).
  float* KvPage(std::span<const PageId> pages, int position) {
    return kv_.get() + size_t(pages[size_t(position / page_size_)]) * page_floats_;
  }

  Eagle3Config config_;
  Model& target_;
  const KernelSet& kernels_;
  int page_size_;
  int64_t num_pages_;
  int max_tokens_;
  Weights w_;
  HugePageBuffer packed_;                  // the packed matrices w_ views
  std::vector<TokenId> draft_to_target_;   // [draft_vocab]
  RopeTables rope_;                        // head_dim wide, pairs (i, i + head_dim / 2)
  // [num_pages, page_floats_] (KvPage), calloc'ed: its pages are touched only as rows are written
  // (the pool is sized for the whole budget).
  struct FreeFloats {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, FreeFloats> kv_;
  size_t page_floats_ = 0;  // 2 * kv_dim * page_size
  size_t kv_floats_ = 0;
  int64_t scores_stride_ = 0;  // max_context rounded up to whole pages
  // Per-call buffers, [max_tokens, ...] (no allocation in Forward).
  std::vector<int32_t> positions_;         // [T] each token's position
  std::vector<int32_t> token_segments_;    // [T] each token's segment
  std::vector<float> h_;                   // [T, H] fc(a), or the fed-back o
  std::vector<float> x_;                   // [T, 2H]
  std::vector<float> q_;                   // [T, heads * head_dim]
  std::vector<float> kv_new_;              // [2, T, kv_dim] the call's k rows, then its v rows
  std::vector<float> attn_;                // [T, heads * head_dim]
  std::vector<float> r_;                   // [T, H]
  std::vector<float> normed_;              // [T, H]
  std::vector<float> gate_, up_;           // [T, intermediate]
  std::vector<float> scores_;              // [threads, heads / kv_heads, scores_stride_]
  std::vector<float> logits_;              // [drafting segments, draft_vocab], grown on demand
};

}  // namespace mlaserve
