// An MLA model (DeepSeek-V2/V3 family) loaded from a checkpoint directory, and its forward pass.
// The model only describes the math: callers own the KV of each sequence and say which
// positions to compute; Forward never allocates.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/types.h"
#include "kernels/ops.h"
#include "kvcache/kv_storage.h"
#include "model/config.h"
#include "model/rope.h"
#include "model/safetensors.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "model/workspace.h"

namespace mlaserve {

struct ModelOptions {
  int max_batch_tokens = 512;  // tokens per Forward call (longer prompts are chunked)
  int max_context = 0;         // 0: min(max_position_embeddings, 4096)
  int num_threads = 0;         // 0: ThreadPool::DefaultThreadCount()
  // --enable-deterministic-inference (SGLang's flag). true: every path is batch-invariant and
  // chunk-invariant (a token's logits are bit-identical whatever shares its step and however its
  // prompt was chunked), which the batch tool's resume relies on. false (default): paths may use
  // faster reduction orders (MHA-form prefill), within tolerance of the reference fixtures.
  bool deterministic = false;
  // Tokens per block of the routed experts (workspace.h kMoeBlockBytes); 0: by memory. Tests set
  // it to run the blocked path on small models.
  int moe_block_tokens = 0;
  // Also loads the checkpoint's first MTP (NEXTN) layer for ForwardMtp; an error if the config
  // declares none (num_nextn_predict_layers 0), and refused under tensor parallelism.
  bool load_mtp = false;
  // Hidden-state capture (EAGLE-3 training data, docs/batch.md): layer index i is the residual
  // stream entering decoder layer i (0: the embeddings; num_hidden_layers: the last layer's
  // output, before the final norm). Strictly increasing, in [0, num_hidden_layers]; every
  // Forward then copies those rows of every token (captured_rows). Refused under tensor
  // parallelism. Empty: no capture, no buffer.
  std::vector<int> capture_layers;
  // Tensor parallelism (model/tensor_parallel.h): this process is rank tp->rank() of
  // tp->size() and loads only its shard. Borrowed, must outlive the model; nullptr: one rank.
  TpCollectives* tp = nullptr;
};

// One sequence's share of a Forward call: its new tokens occupy positions
// [num_computed_tokens, num_computed_tokens + num_tokens); their KV rows are written through the
// page table `pages` (borrowed for the call), which must already cover them. Forward reads and
// writes rows only: it does not advance the sequence (the caller records the new positions,
// SequenceKv::MarkComputed, once the call succeeded).
struct ForwardSegment {
  std::span<const PageId> pages;  // position p: row p % page_size of pages[p / page_size]
  int num_computed_tokens;        // positions [0, num_computed_tokens) already have rows
  int num_tokens;
  bool all_logits = false;  // logits for every token of this segment, not just its last
  bool no_logits = false;   // kLastPerSegment: no row for this segment (its KV rows only)
};

enum class LogitsMode { kLastPerSegment, kAllTokens };

// Where Forward's time goes, for bench (Model::set_timings): accumulated over every Forward
// while set; the caller times the whole call and zeroes the fields when it wants.
struct ForwardTimings {
  int64_t attention_ns = 0;  // in the attention block of every layer (projections included)
  // Of which attention over the KV cache itself (the absorbed form's splits and merge, the MHA
  // form's blocks; not the projections, the cache writes or the query absorption).
  int64_t attention_core_ns = 0;
  int64_t forward_calls = 0;  // Forward calls that computed something
  // The routed experts that ran (at least one token routed to them), summed over every MoE
  // layer's token blocks, and how many blocks: what a step really reads of the experts.
  int64_t routed_experts_run = 0;
  int64_t moe_blocks = 0;
  // Where the rest goes (bench's decode phase table), besides attention_core_ns: the attention
  // block's projections (q_a and q_b or q_proj, kv_a with the cache write, o_proj), the absorbed
  // form's kv_b products (W_UK into the queries, W_UV out of the latent), the MLPs' products
  // (dense MLPs, routed and shared experts), the router (its product, top-k and the experts'
  // combine), lm_head. Norms, the embedding row and the residual adds are what is left. Under
  // tensor parallelism a collective's time (waiting for the other ranks included) falls in the
  // phase that calls it (bench prints the phases for one process only).
  int64_t projections_ns = 0;
  int64_t kv_b_ns = 0;
  int64_t mlp_ns = 0;
  int64_t router_ns = 0;
  int64_t lm_head_ns = 0;
};

// Adds the time since its start, or since the previous Add, to one ForwardTimings field; reads
// no clock when the timings are off (nullptr).
class PhaseClock {
 public:
  explicit PhaseClock(ForwardTimings* timings)
      : timings_(timings), last_(timings != nullptr ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point()) {}
  void Add(int64_t ForwardTimings::*field) {
    if (timings_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    timings_->*field += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    last_ = now;
  }

 private:
  ForwardTimings* timings_;
  std::chrono::steady_clock::time_point last_;
};

class Model {
 public:
  // Whether a segment's attention runs in the MHA form (mla_prefill_attention.cc) rather than the
  // absorbed one: never in deterministic mode, else when the segment has enough new tokens that
  // the MHA form does fewer multiply-adds (reads only the segment's two token counts).
  bool UseMhaPrefill(const ForwardSegment& seg) const;
  // Per-token work (embedding, norms, routing, the MoE combine) is split over the pool when a
  // Forward call has at least parallel_tokens() tokens: kParallelFloats / hidden_size, about
  // 30 us of norm work, twice a fork-join of the pool (measured on a busy 2-vCPU host: 15 us per
  // RunOnAll, 0.9 us per 2048-wide add_rms_norm). Below it, it runs on the calling thread.
  static constexpr int64_t kParallelFloats = 64 << 10;
  int parallel_tokens() const { return parallel_tokens_; }

  static Result<std::unique_ptr<Model>> Load(const std::string& model_dir,
                                             const ModelOptions& options);

  const ModelConfig& config() const { return config_; }
  int max_context() const { return workspace_.max_context; }
  int max_batch_tokens() const { return workspace_.max_tokens; }
  ThreadPool& pool() { return pool_; }
  const ModelWeights& weights() const { return weights_; }
  // The checkpoint's bytes this process holds: the whole checkpoint but the MTP layers it does
  // not load (never read) on one rank, the rank's shard under tensor parallelism (the KV budget
  // subtracts it).
  size_t weight_bytes() const {
    return tp_size() > 1 ? shard_weight_bytes_ : checkpoint_->total_tensor_bytes() - skipped_mtp_bytes_;
  }
  int tp_size() const { return tp_ == nullptr ? 1 : tp_->size(); }
  const Checkpoint& checkpoint() const { return *checkpoint_; }

  // tokens: the segments' tokens concatenated (at most max_batch_tokens). logits receives, in
  // segment order, one row per segment (kLastPerSegment) or per token (kAllTokens); a segment
  // with all_logits gets a row for each of its tokens either way.
  // Errors (a token id out of range, a context overflow) leave every KV unchanged.
  // kernels: the table to compute with (DefaultKernels() unless a test compares tables).
  // kv: the storage every segment's page ids index; it must have the model's shape, and the
  // segments' pages must be in host memory (PageLocation::kHost): rows are read and written
  // through its HostRows view, resolved once per call.
  Status Forward(const KernelSet& kernels, KvStorage& kv, std::span<const TokenId> tokens,
                 std::span<const ForwardSegment> segments, LogitsMode mode, float* logits);
  // The MTP (NEXTN) layer (ModelOptions::load_mtp; docs/architecture.md, "MTP drafts"). Token i
  // of the call, at position p of its segment, is the pair (prev_hidden row i, tokens[i]): the
  // final-normed hidden state at position p (the target's, all_hidden_rows, or the MTP's own
  // for a chained draft) and the token at position p + 1; its logits predict the token at p + 2.
  // mtp_kv: the MTP layer's own cache, one layer, indexed by the segments' pages like Forward's.
  // Logits rows as Forward; last_hidden_rows then holds the MTP's shared_head-normed rows.
  // prev_hidden [tokens.size(), hidden_size] may not alias the model's buffers.
  bool has_mtp() const { return weights_.has_mtp; }
  Status ForwardMtp(const KernelSet& kernels, KvStorage& mtp_kv, std::span<const TokenId> tokens,
                    std::span<const float> prev_hidden, std::span<const ForwardSegment> segments, LogitsMode mode,
                    float* logits);
  // Ranks 1.. of a tensor-parallel job: runs rank 0's Forward calls (broadcast by its Forward,
  // with the arguments it was given) on this rank's shard, each KV storage of rank 0 mirrored by
  // one of the same shape here, until rank 0 stops the workers (TpCollectives::StopWorkers).
  // Errors: a call this rank cannot run (it cannot happen when rank 0 validated it).
  Status RunTpWorker();
  // Accumulates each Forward's attention time into *timings until set back to nullptr (the
  // default: then no clock is read). Not thread-safe: set it between Forward calls.
  void set_timings(ForwardTimings* timings) { timings_ = timings; }
  // The final-normed hidden state of each logits row of the last Forward, [rows, hidden_size]
  // (what lm_head multiplied); valid until the next Forward or ForwardMtp.
  std::span<const float> last_hidden_rows(int num_rows) const {
    return std::span(workspace_.last_hidden).first(size_t(num_rows) * size_t(config_.hidden_size));
  }
  // The final-normed hidden state of every token of the last Forward (or ForwardMtp), in call
  // order, [num_tokens, hidden_size]; valid until the next Forward or ForwardMtp.
  std::span<const float> all_hidden_rows(int num_tokens) const {
    return std::span(workspace_.normed).first(size_t(num_tokens) * size_t(config_.hidden_size));
  }
  // ModelOptions::capture_layers, and the captured rows of every token of the last Forward, in
  // call order, [num_tokens, C * hidden_size] (token t's C layers concatenated in layer order);
  // valid until the next Forward. Empty when nothing is captured.
  std::span<const int> capture_layers() const { return capture_layers_; }
  int captured_width() const { return int(capture_layers_.size()) * config_.hidden_size; }
  std::span<const float> captured_rows(int num_tokens) const {
    return std::span(workspace_.captured).first(size_t(num_tokens) * size_t(captured_width()));
  }

 private:
  Model(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ModelWeights weights,
        const ModelOptions& options, int max_context, int num_threads);

  // tensor_parallel_forward.cc: the shard's heads, experts, gather sizes and buffers.
  void SetUpTensorParallel(TpCollectives* tp, size_t shard_weight_bytes);
  // Validates a call's arguments against a storage of kv_layers layers, before any KV row is
  // touched, and fills token_positions_ and token_segments_.
  Status CheckForwardCall(KvStorage& kv, int kv_layers, std::span<const TokenId> tokens,
                          std::span<const ForwardSegment> segments);
  // Copies ws.hidden (the residual stream entering layer `layer`) into ws.captured when the
  // layer is captured.
  void CaptureLayer(int layer, int n);
  // ws.hidden rows = the tokens' embeddings, in fp32.
  void Embed(const KernelSet& k, std::span<const TokenId> tokens);
  // One decoder layer on ws.hidden, whose rows ws.normed holds normalised by layer.input_norm;
  // its cache rows are layer kv_layer of kv. Leaves ws.normed = rms_norm(hidden) * next_norm
  // (nullptr: the caller normalises; hidden is updated either way).
  void DecoderLayer(const ComputeContext& ctx, const KvHostRows& kv, const LayerWeights& layer, int kv_layer, int n,
                    std::span<const ForwardSegment> segments, const float* next_norm);
  // ws.normed = rms_norm(hidden) * norm for every token; the rows whose logits are wanted are
  // copied to ws.last_hidden in order. Returns their count.
  int NormOutputRows(const KernelSet& k, const float* norm, int n, std::span<const ForwardSegment> segments,
                     LogitsMode mode);
  // mla_attention.cc: projections, the cache rows, then each segment in its form, then o_proj.
  void Attention(const ComputeContext& ctx, const KvHostRows& kv, const AttentionWeights& w, int kv_layer,
                 int num_tokens, std::span<const ForwardSegment> segments);
  // mla_decode_attention.cc: the absorbed form for `tokens` (indices into the step), split along
  // the KV length; q_lat, then o_lat of those tokens.
  void AbsorbQueries(const KernelSet& k, const AttentionWeights& w, std::span<const int32_t> tokens);
  void AbsorbedAttention(const KernelSet& k, const KvHostRows& kv, int layer, std::span<const int32_t> tokens,
                         std::span<const ForwardSegment> segments);
  // mla_prefill_attention.cc: the MHA form for one segment whose tokens start at first_token;
  // writes their attn_out rows (UseMhaPrefill says when). gemm_scratch: ComputeContext's (the
  // latents packed once per block for every head's key and value products, where it has room).
  void MhaPrefillAttention(const KernelSet& k, const AttentionWeights& w, const KvHostRows& kv, int layer,
                           int first_token, const ForwardSegment& seg, std::span<float> gemm_scratch);
  void DenseMlp(const ComputeContext& ctx, const MlpWeights& w, int num_tokens, float* out);
  // Tensor parallelism (tensor_parallel_forward.cc). An MLP whose gate/up and down hold this
  // rank's output rows: out [n, H] = down(silu(gate(x)) * up(x)), gathering the intermediate
  // and the output from every rank.
  void ShardedMlp(const ComputeContext& ctx, const MlpWeights& w, const float* x, int n, int64_t full_inter,
                  float* out);
  // Every rank's rows of a matrix of total_rows rows sharded like m (ShardRowUnit), times
  // `scale`: the per-token column counts of its product's gather (in tp_row_counts_).
  std::span<const int64_t> RowShardCounts(int64_t total_rows, const WeightMatrix& m);
  // Every rank's [n, per_token[r]] columns (local: this rank's, contiguous) into out
  // [n, sum per_token], through workspace_.tp_stage; root_only: only rank 0 receives.
  void GatherColumns(const float* local, int n, std::span<const int64_t> per_token, float* out, bool root_only);
  // The logits rows from the rank's lm_head rows, gathered on rank 0 in blocks of rows.
  void ShardedLogits(const ComputeContext& ctx, int num_rows, float* logits);
  // Rank 0: the call's arguments to the workers (RunTpWorker), before computing it.
  void BroadcastForwardCall(const KernelSet& kernels, KvStorage& kv, std::span<const TokenId> tokens,
                            std::span<const ForwardSegment> segments, LogitsMode mode);
  void Moe(const ComputeContext& ctx, const MoeWeights& w, int num_tokens);
  // Runs workspace_.mlp_groups[0, num_groups) in one parallel region: gathers, then gate/up
  // tiles (SiLU fused), then down tiles, taken in that order by whichever thread is free.
  void RunMlps(const ComputeContext& ctx, int num_groups);
  // fn(begin, end, thread) over [0, n) split evenly over the pool's threads, or fn(0, n, 0) on
  // the calling thread when n < parallel_tokens() (a fork-join costs more than the work).
  void ForTokenRanges(int n, FunctionRef<void(int begin, int end, int thread)> fn);
  void RouteToken(const MoeWeights& w, const float* logits, float* scratch, int32_t* ids,
                  float* weights) const;

  ModelConfig config_;
  bool deterministic_;  // ModelOptions::deterministic
  std::unique_ptr<Checkpoint> checkpoint_;
  ModelWeights weights_;
  ThreadPool pool_;
  RopeTables rope_;
  Workspace workspace_;
  std::vector<int32_t> token_positions_;  // [max_batch_tokens] position of each token
  std::vector<int32_t> token_segments_;   // [max_batch_tokens] segment of each token
  ForwardTimings* timings_ = nullptr;     // borrowed; see set_timings
  std::vector<int> capture_layers_;       // ModelOptions::capture_layers
  std::vector<int> capture_slot_;         // [num_hidden_layers + 1] slot in ws.captured, -1: not captured
  int parallel_tokens_;

  // Tensor parallelism: nullptr on one rank. Per-rank floats per token of each gathered output
  // (ShardCounts), and this rank's heads and routed experts.
  TpCollectives* tp_ = nullptr;
  size_t shard_weight_bytes_ = 0;
  size_t skipped_mtp_bytes_ = 0;  // checkpoint bytes of MTP layers not loaded
  int local_heads_ = 0;                         // heads this rank computes (all on one rank)
  int expert_begin_ = 0, expert_end_ = 0;       // routed experts this rank holds
  std::vector<int64_t> tp_attn_counts_;  // [tp size] attention output floats per token of each rank
  std::vector<int64_t> tp_row_counts_;   // [tp size] RowShardCounts' result
  std::vector<int64_t> tp_block_counts_;  // [tp size] floats per block of one collective
  std::vector<int32_t> tp_call_;          // a broadcast forward call's arguments (rank 0 and workers)
};

}  // namespace mlaserve
