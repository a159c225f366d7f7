#include "model/eagle3_draft.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/log.h"
#include "core/read_file.h"
#include "kernels/ops.h"
#include "kernels/pack.h"
#include "model/config_fields.h"
#include "model/safetensors.h"

namespace mlaserve {
namespace {

using nlohmann::json;

// A stored tensor in F32, BF16 or F16 (the dense formats the kernels widen).
Result<const TensorView*> DenseTensor(const Checkpoint& ckpt, const std::string& name) {
  const TensorView* t = ckpt.Find(name);
  if (t == nullptr) return Status::Error("EAGLE-3 draft: tensor " + name + " is missing");
  if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16) {
    return Status::Error("EAGLE-3 draft: " + name + " is " + DTypeName(t->dtype) + " (F32, BF16 or F16 expected)");
  }
  return t;
}

// A row-major matrix view of a stored tensor [rows, cols].
Result<WeightMatrix> StoredMatrix(const Checkpoint& ckpt, const std::string& name, int64_t rows, int64_t cols) {
  auto t = DenseTensor(ckpt, name);
  if (!t.ok()) return t.status();
  if ((*t)->shape != std::vector<int64_t>{rows, cols}) {
    return Status::Error("EAGLE-3 draft: " + name + " has shape " + (*t)->ShapeString() + ", expected [" +
                         std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  return WeightMatrix{.dtype = (*t)->dtype, .rows = rows, .cols = cols, .data = (*t)->data};
}

// A norm weight [dim] (or [1, dim]), widened to fp32.
Result<std::vector<float>> StoredVector(const Checkpoint& ckpt, const std::string& name, int64_t dim) {
  auto t = DenseTensor(ckpt, name);
  if (!t.ok()) return t.status();
  if ((*t)->numel() != dim || ((*t)->shape.size() != 1 && (*t)->shape != std::vector<int64_t>{1, dim})) {
    return Status::Error("EAGLE-3 draft: " + name + " has shape " + (*t)->ShapeString() + ", expected [" +
                         std::to_string(dim) + "]");
  }
  std::vector<float> out(size_t(dim), 0.0f);
  PortableKernels().axpy_row(1.0f, WeightMatrix{.dtype = (*t)->dtype, .rows = 1, .cols = dim, .data = (*t)->data}, 0,
                             out.data());
  return out;
}

}  // namespace

std::vector<int> Eagle3DefaultCaptureLayers(int target_layers) {
  const int L = target_layers;
  return {2, L / 2, L - 3};  // SGLang's default ids [1, L/2 - 1, L - 4], each + 1
}

Result<std::vector<int>> Eagle3Config::CaptureLayers(int target_layers) const {
  const int L = target_layers;
  std::vector<int> layers;
  if (aux_layer_ids.empty()) {
    layers = Eagle3DefaultCaptureLayers(L);
  } else {
    for (int id : aux_layer_ids) layers.push_back(id + 1);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 1 || layers[i] > L - 1 || (i > 0 && layers[i] <= layers[i - 1])) {
      std::string ids;
      for (int l : layers) ids += (ids.empty() ? "" : ", ") + std::to_string(l - 1);
      return Status::Error("EAGLE-3 draft: eagle_aux_hidden_state_layer_ids [" + ids + "]" +
                           (aux_layer_ids.empty() ? " (SGLang's default for this depth)" : "") +
                           " for a target of " + std::to_string(L) +
                           " layers: each must be in [0, L - 2] and strictly increasing");
    }
  }
  return layers;
}

Result<Eagle3Config> ReadEagle3Config(const std::string& dir) {
  const std::string source = dir + "/config.json";
  auto text = ReadWholeFile(source);
  if (!text.ok()) return Status::Error("--speculative-draft-model-path: " + text.error());
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::Error(source + ": not a JSON object");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    arch = j["architectures"][0].get<std::string>();
  }
  if (arch != "LlamaForCausalLMEagle3" && arch != "Eagle3LlamaForCausalLM") {
    return Status::Error(source + ": architectures[0] is \"" + arch +
                         "\"; an EAGLE-3 draft (LlamaForCausalLMEagle3) is expected");
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    return Status::Error(source + ": rope_scaling is not supported for EAGLE-3 drafts (plain RoPE only)");
  }
  using namespace config_limits;
  FieldReader r(j, source);
  Eagle3Config c;
  const int layers = r.Int("num_hidden_layers", {.min = 1, .max = kMaxLayers}, 1, false);
  const std::string act = r.String("hidden_act", "silu");
  const bool biases = r.Bool("attention_bias", false) || r.Bool("mlp_bias", false);
  c.rms_norm_eps = r.Double("rms_norm_eps", c.rms_norm_eps, false);
  c.rope_theta = r.Double("rope_theta", c.rope_theta, false);
  const IntRange hidden{.min = 1, .max = kMaxHidden}, heads{.min = 1, .max = kMaxHeads},
      vocab{.min = 1, .max = kMaxVocab};
  c.hidden_size = r.Int("hidden_size", hidden, 0, true);
  c.target_hidden_size = r.Int("target_hidden_size", hidden, c.hidden_size, false);
  c.intermediate_size = r.Int("intermediate_size", {.min = 1, .max = kMaxIntermediate}, 0, true);
  c.num_attention_heads = r.Int("num_attention_heads", heads, 0, true);
  c.num_key_value_heads = r.Int("num_key_value_heads", heads, c.num_attention_heads, false);
  c.vocab_size = r.Int("vocab_size", vocab, 0, true);
  c.draft_vocab_size = r.Int("draft_vocab_size", vocab, c.vocab_size, false);
  c.head_dim = r.Int("head_dim", {.min = 1, .max = kMaxHeadDim},
                     c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0, false);
  if (c.head_dim < 1) r.Fail("head_dim", "must be a positive integer");
  MLA_RETURN_IF_ERROR(r.error());
  if (layers != 1) {
    return Status::Error(source + ": num_hidden_layers is " + std::to_string(layers) +
                         "; EAGLE-3 drafts with more than one layer are not supported");
  }
  if (act != "silu") return Status::Error(source + ": hidden_act must be silu");
  if (biases) return Status::Error(source + ": attention_bias and mlp_bias are not supported");
  if (c.num_attention_heads % c.num_key_value_heads != 0 || c.head_dim % 2 != 0) {
    return Status::Error(source + ": num_attention_heads must be a multiple of num_key_value_heads, head_dim even");
  }
  if (c.draft_vocab_size > c.vocab_size) return Status::Error(source + ": draft_vocab_size exceeds vocab_size");
  if (j.contains("eagle_config") && j["eagle_config"].is_object()) {
    const json& e = j["eagle_config"];
    if (e.contains("eagle_aux_hidden_state_layer_ids") && !e["eagle_aux_hidden_state_layer_ids"].is_null()) {
      const json& ids = e["eagle_aux_hidden_state_layer_ids"];
      const IntRange layer_id{.min = 0, .max = kMaxLayers};
      if (!ids.is_array() || ids.size() != 3 ||
          !std::all_of(ids.begin(), ids.end(), [&](const json& id) { return IntInRange(id, layer_id).has_value(); })) {
        return Status::Error(source + ": eagle_config.eagle_aux_hidden_state_layer_ids must list 3 layer ids in [0, " +
                             std::to_string(kMaxLayers) + "], got " + QuoteJson(ids));
      }
      for (const json& id : ids) c.aux_layer_ids.push_back(*IntInRange(id, layer_id));
    }
    FieldReader eagle(e, source, "eagle_config.");
    const bool aux = eagle.Bool("use_aux_hidden_state", true);
    MLA_RETURN_IF_ERROR(eagle.error());
    if (!aux) return Status::Error(source + ": use_aux_hidden_state false (an EAGLE-1/2 style draft) is not supported");
  }
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.path().extension() != ".safetensors") continue;
    const uintmax_t bytes = entry.file_size(error);
    if (!error) c.checkpoint_bytes += size_t(bytes);
  }
  return c;
}

Eagle3Draft::Eagle3Draft(Eagle3Config config, Model& target, const KernelSet& kernels, int page_size,
                         int64_t num_pages)
    : config_(std::move(config)),
      target_(target),
      kernels_(kernels),
      page_size_(page_size),
      num_pages_(num_pages),
      max_tokens_(target.max_batch_tokens()),
      rope_(
          [&] {
            ModelConfig rope_config;
            rope_config.qk_rope_head_dim = config_.head_dim;
            rope_config.rope_theta = config_.rope_theta;
            rope_config.rope_interleave = false;
            return rope_config;
          }(),
          target.max_context()) {
  const size_t T = size_t(max_tokens_);
  const size_t H = size_t(config_.hidden_size);
  const size_t q_dim = size_t(config_.num_attention_heads) * size_t(config_.head_dim);
  page_floats_ = size_t(2) * size_t(config_.kv_dim()) * size_t(page_size);
  kv_floats_ = size_t(num_pages) * page_floats_;
  // calloc: zeros, and for an allocation this large fresh mapped pages the kernel zeroes only as
  // they are first touched (a row never written reads as zero, never as garbage).
  kv_.reset(static_cast<float*>(std::calloc(kv_floats_, sizeof(float))));  // (Load checks it)
  positions_.resize(T);
  token_segments_.resize(T);
  h_.resize(T * H);
  x_.resize(T * 2 * H);
  q_.resize(T * q_dim);
  kv_new_.resize(T * 2 * size_t(config_.kv_dim()));
  attn_.resize(T * q_dim);
  r_.resize(T * H);
  normed_.resize(T * H);
  gate_.resize(T * size_t(config_.intermediate_size));
  up_.resize(T * size_t(config_.intermediate_size));
  scores_stride_ = (int64_t(target.max_context()) + page_size - 1) / page_size * page_size;
  scores_.resize(size_t(target.pool().num_threads()) *
                 size_t(config_.num_attention_heads / config_.num_key_value_heads) * size_t(scores_stride_));
}

Result<std::unique_ptr<Eagle3Draft>> Eagle3Draft::Load(const std::string& dir, Model& target,
                                                       const KernelSet& kernels, int page_size, int64_t num_pages) {
  auto config = ReadEagle3Config(dir);
  if (!config.ok()) return config.status();
  const Eagle3Config& c = *config;
  const ModelConfig& t = target.config();
  if (c.vocab_size != t.vocab_size) {
    return Status::Error("EAGLE-3 draft: vocab_size " + std::to_string(c.vocab_size) + " differs from the target's " +
                         std::to_string(t.vocab_size));
  }
  if (c.target_hidden_size != t.hidden_size || c.hidden_size != t.hidden_size) {
    return Status::Error("EAGLE-3 draft: hidden_size " + std::to_string(c.hidden_size) + " / target_hidden_size " +
                         std::to_string(c.target_hidden_size) + " must both equal the target's hidden_size " +
                         std::to_string(t.hidden_size) + " (the draft reads the target's embedding)");
  }
  auto layers = c.CaptureLayers(t.num_hidden_layers);
  if (!layers.ok()) return layers.status();
  if (!std::ranges::equal(*layers, target.capture_layers())) {
    return Status::Error("EAGLE-3 draft: the target was not loaded capturing the draft's layers");
  }
  auto ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return Status::Error("EAGLE-3 draft: " + ckpt.error());
  const Checkpoint& k = **ckpt;

  // Every matrix is checked against the file before the draft's buffers, sized from its config,
  // are allocated.
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t q_dim = int64_t(c.num_attention_heads) * c.head_dim;
  Weights w;
  struct Spec {
    WeightMatrix Weights::*m;
    const char* name;
    int64_t rows, cols;
  };
  const Spec specs[] = {{&Weights::fc, "fc.weight", H, 3 * int64_t(c.target_hidden_size)},
                        {&Weights::q_proj, "midlayer.self_attn.q_proj.weight", q_dim, 2 * H},
                        {&Weights::k_proj, "midlayer.self_attn.k_proj.weight", c.kv_dim(), 2 * H},
                        {&Weights::v_proj, "midlayer.self_attn.v_proj.weight", c.kv_dim(), 2 * H},
                        {&Weights::o_proj, "midlayer.self_attn.o_proj.weight", H, q_dim},
                        {&Weights::gate, "midlayer.mlp.gate_proj.weight", I, H},
                        {&Weights::up, "midlayer.mlp.up_proj.weight", I, H},
                        {&Weights::down, "midlayer.mlp.down_proj.weight", H, I},
                        {&Weights::lm_head, "lm_head.weight", c.draft_vocab_size, H}};
  for (const Spec& s : specs) {
    auto m = StoredMatrix(k, s.name, s.rows, s.cols);
    if (!m.ok()) return m.status();
    w.*s.m = *m;
  }
  struct NormSpec {
    std::vector<float>* v;
    const char* name;
  };
  for (const NormSpec& s : {NormSpec{&w.hidden_norm, "midlayer.hidden_norm.weight"},
                            NormSpec{&w.input_norm, "midlayer.input_layernorm.weight"},
                            NormSpec{&w.post_attention_norm, "midlayer.post_attention_layernorm.weight"},
                            NormSpec{&w.norm, "norm.weight"}}) {
    auto v = StoredVector(k, s.name, H);
    if (!v.ok()) return v.status();
    *s.v = std::move(v).value();
  }
  std::unique_ptr<Eagle3Draft> d(new Eagle3Draft(c, target, kernels, page_size, num_pages));
  if (d->kv_ == nullptr) {
    return Status::Error("EAGLE-3 draft: cannot allocate its cache of " +
                         std::to_string(double(d->cache_bytes()) / 1e9) + " GB");
  }
  d->w_ = std::move(w);
  std::vector<WeightMatrix*> matrices;
  for (const Spec& s : specs) matrices.push_back(&(d->w_.*s.m));
  MLA_RETURN_IF_ERROR(PackAll(matrices, d->packed_, target.pool()));

  if (k.Find("embed_tokens.weight") != nullptr) {
    Log(LogLevel::kInfo, "[mlaserve] EAGLE-3 draft %s: its embed_tokens is not read; the target's embedding is used "
                         "(as SGLang does)", dir.c_str());
  }
  // d2t: target id = draft id + d2t[draft id]. Without it the draft vocabulary is the target's.
  d->draft_to_target_.resize(size_t(c.draft_vocab_size));
  const TensorView* d2t = k.Find("d2t");
  if (d2t == nullptr && c.draft_vocab_size != c.vocab_size) {
    return Status::Error("EAGLE-3 draft: draft_vocab_size " + std::to_string(c.draft_vocab_size) +
                         " < vocab_size but the checkpoint has no d2t map");
  }
  if (d2t != nullptr && (d2t->dtype != DType::kI64 || d2t->shape != std::vector<int64_t>{c.draft_vocab_size})) {
    return Status::Error("EAGLE-3 draft: d2t must be I64 [" + std::to_string(c.draft_vocab_size) + "], is " +
                         DTypeName(d2t->dtype) + " " + d2t->ShapeString());
  }
  for (int i = 0; i < c.draft_vocab_size; ++i) {
    int64_t offset_i = 0;
    if (d2t != nullptr) std::memcpy(&offset_i, d2t->data + size_t(i) * 8, 8);
    const int64_t id = i + offset_i;
    if (id < 0 || id >= c.vocab_size) {
      return Status::Error("EAGLE-3 draft: d2t maps draft token " + std::to_string(i) + " to " + std::to_string(id) +
                           ", outside the vocabulary");
    }
    d->draft_to_target_[size_t(i)] = TokenId(id);
  }
  return d;  // (the checkpoint is unmapped here: everything was copied)
}

Status Eagle3Draft::CheckCall(std::span<const TokenId> tokens, std::span<const float> inputs, bool from_target,
                              std::span<const ForwardSegment> segments, size_t drafts, size_t out_hidden) const {
  const size_t n = tokens.size();
  if (int64_t(n) > max_tokens_) return Status::Error("EAGLE-3 draft: more tokens than one step holds");
  const size_t width = size_t(from_target ? target_width() : hidden_size());
  if (inputs.size() != n * width) return Status::Error("EAGLE-3 draft: input rows do not match the tokens");
  for (TokenId t : tokens) {
    if (t < 0 || t >= config_.vocab_size) return Status::Error("EAGLE-3 draft: token id out of range");
  }
  size_t total = 0, rows = 0;
  for (const ForwardSegment& s : segments) {
    const int64_t end = int64_t(s.num_computed_tokens) + s.num_tokens;
    if (s.num_computed_tokens < 0 || s.num_tokens < 1 || end > target_.max_context() ||
        end > int64_t(s.pages.size()) * page_size_) {
      return Status::Error("EAGLE-3 draft: a segment's positions are outside its pages or the context");
    }
    for (int64_t p = 0; p < (end + page_size_ - 1) / page_size_; ++p) {  // (attention reads from position 0)
      if (s.pages[size_t(p)] < 0 || s.pages[size_t(p)] >= num_pages_) {
        return Status::Error("EAGLE-3 draft: a page id is outside the cache");
      }
    }
    total += size_t(s.num_tokens);
    rows += s.no_logits ? 0 : 1;
  }
  if (total != n) return Status::Error("EAGLE-3 draft: the segments do not cover the tokens");
  if (drafts < rows || out_hidden < rows * size_t(hidden_size())) {
    return Status::Error("EAGLE-3 draft: the output buffers are too small");
  }
  return Status::Ok();
}

void Eagle3Draft::Attention(std::span<const ForwardSegment> segments, int n) {
  const int heads = config_.num_attention_heads;
  const int kv_heads = config_.num_key_value_heads;
  const int64_t group = heads / kv_heads;
  const int64_t d = config_.head_dim;
  const int64_t kv_dim = config_.kv_dim();
  const int64_t ps = page_size_;
  const float scale = 1.0f / std::sqrt(float(d));
  std::atomic<int64_t> next{0};
  const int64_t items = int64_t(n) * kv_heads;
  target_.pool().RunOnAll([&](int thread) {
    float* scores = scores_.data() + size_t(thread) * size_t(group) * size_t(scores_stride_);  // [group, stride]
    for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < items;
         item = next.fetch_add(1, std::memory_order_relaxed)) {
      const int t = int(item / kv_heads);
      const int64_t g = item % kv_heads;
      const ForwardSegment& seg = segments[size_t(token_segments_[size_t(t)])];
      const int64_t len = positions_[size_t(t)] + 1;  // rows 0..position
      const float* q = q_.data() + (int64_t(t) * heads + g * group) * d;  // [group, d]
      float* out = attn_.data() + (int64_t(t) * heads + g * group) * d;   // [group, d]
      for (int64_t first = 0; first < len; first += ps) {
        const float* kt = KvPage(seg.pages, int(first)) + g * d * ps;  // [d, ps]
        kernels_.gemm_f32(q, d, kt, ps, scores + first, scores_stride_, group, d, std::min(ps, len - first), false);
      }
      for (int64_t h = 0; h < group; ++h) {
        const std::span<float> row(scores + h * scores_stride_, size_t(len));
        for (float& x : row) x *= scale;
        Softmax(row);
      }
      std::fill(out, out + group * d, 0.0f);
      for (int64_t first = 0; first < len; first += ps) {
        const float* v = KvPage(seg.pages, int(first)) + kv_dim * ps + g * ps * d;  // [ps, d]
        kernels_.gemm_f32(scores + first, scores_stride_, v, d, out, d, group, std::min(ps, len - first), d, true);
      }
    }
  });
}

Status Eagle3Draft::Forward(std::span<const TokenId> tokens, std::span<const float> inputs, bool from_target,
                            std::span<const ForwardSegment> segments, std::span<TokenId> drafts,
                            std::span<float> out_hidden) {
  MLA_RETURN_IF_ERROR(CheckCall(tokens, inputs, from_target, segments, drafts.size(), out_hidden.size()));
  const int n = int(tokens.size());
  if (n == 0) return Status::Ok();
  const ComputeContext ctx{&kernels_, &target_.pool()};
  const KernelSet& k = kernels_;
  const Eagle3Config& c = config_;
  const int64_t H = c.hidden_size, I = c.intermediate_size, kv_dim = c.kv_dim(), d = c.head_dim;
  const int heads = c.num_attention_heads;
  const double eps = c.rms_norm_eps;
  const WeightMatrix& embed = target_.weights().embed;

  // h = fc(a) (or the fed-back rows); x = [input_layernorm(embed(t)) | hidden_norm(h)].
  if (from_target) {
    MatMul(ctx, inputs.data(), n, w_.fc, h_.data());
  } else {
    std::copy(inputs.begin(), inputs.end(), h_.begin());
  }
  for (int t = 0, s = 0, first = 0; t < n; ++t) {
    while (t >= first + segments[size_t(s)].num_tokens) first += segments[size_t(s++)].num_tokens;
    positions_[size_t(t)] = segments[size_t(s)].num_computed_tokens + (t - first);
    token_segments_[size_t(t)] = s;
    float* x = x_.data() + int64_t(t) * 2 * H;
    std::fill(x, x + H, 0.0f);
    k.axpy_row(1.0f, embed, tokens[size_t(t)], x);
    k.rms_norm(x, w_.input_norm.data(), H, eps, x);
    k.rms_norm(h_.data() + int64_t(t) * H, w_.hidden_norm.data(), H, eps, x + H);
  }

  // q, k, v; RoPE on q and k; the new k and v rows into the cache.
  MatMul(ctx, x_.data(), n, w_.q_proj, q_.data());
  MatMulPair(ctx, x_.data(), n, w_.k_proj, w_.v_proj, kv_new_.data(), kv_new_.data() + int64_t(n) * kv_dim);
  for (int t = 0; t < n; ++t) {
    const int position = positions_[size_t(t)];
    for (int h = 0; h < heads; ++h) rope_.Apply(q_.data() + (int64_t(t) * heads + h) * d, position);
    float* key = kv_new_.data() + int64_t(t) * kv_dim;
    const float* value = kv_new_.data() + (int64_t(n) + t) * kv_dim;
    for (int h = 0; h < c.num_key_value_heads; ++h) rope_.Apply(key + h * d, position);
    // Into the page's K^T column and V row (KvPage's layout).
    float* page = KvPage(segments[size_t(token_segments_[size_t(t)])].pages, position);
    const int64_t ps = page_size_, row = position % page_size_;
    for (int64_t i = 0; i < kv_dim; ++i) page[i * ps + row] = key[i];
    for (int64_t h = 0; h < c.num_key_value_heads; ++h) {
      std::copy_n(value + h * d, d, page + kv_dim * ps + (h * ps + row) * d);
    }
  }
  Attention(segments, n);

  // r = h + o_proj(attn); o = r + mlp(post_attention_layernorm(r)), o kept in h_.
  MatMul(ctx, attn_.data(), n, w_.o_proj, r_.data());
  for (int t = 0; t < n; ++t) {
    k.add_rms_norm(r_.data() + int64_t(t) * H, h_.data() + int64_t(t) * H, w_.post_attention_norm.data(), H, eps,
                   normed_.data() + int64_t(t) * H);
  }
  MatMulPair(ctx, normed_.data(), n, w_.gate, w_.up, gate_.data(), up_.data());
  k.silu_mul(gate_.data(), up_.data(), int64_t(n) * I, gate_.data());
  MatMul(ctx, gate_.data(), n, w_.down, h_.data());
  for (int64_t i = 0; i < int64_t(n) * H; ++i) h_[size_t(i)] += r_[size_t(i)];

  // The drafting segments' last rows: o out, norm(o) through lm_head, the argmax mapped by d2t.
  int rows = 0;
  for (int s = 0, first = 0; s < int(segments.size()); first += segments[size_t(s++)].num_tokens) {
    if (segments[size_t(s)].no_logits) continue;
    const float* o = h_.data() + int64_t(first + segments[size_t(s)].num_tokens - 1) * H;
    std::copy_n(o, H, out_hidden.data() + int64_t(rows) * H);
    k.rms_norm(o, w_.norm.data(), H, eps, normed_.data() + int64_t(rows) * H);
    ++rows;
  }
  if (rows == 0) return Status::Ok();
  // (Grows to the most drafting sequences one step holds, then stays: [rows, draft_vocab].)
  if (logits_.size() < size_t(rows) * size_t(c.draft_vocab_size)) logits_.resize(size_t(rows) * size_t(c.draft_vocab_size));
  MatMul(ctx, normed_.data(), rows, w_.lm_head, logits_.data());
  const int64_t V = c.draft_vocab_size;
  for (int row = 0; row < rows; ++row) {
    const float* l = logits_.data() + row * V;
    drafts[size_t(row)] = draft_to_target_[size_t(std::max_element(l, l + V) - l)];
  }
  return Status::Ok();
}

}  // namespace mlaserve
