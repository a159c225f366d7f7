#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/float16.h"
#include "kernels/pack.h"

namespace mlaserve {

std::vector<float> TensorToF32(const TensorView& t) {
  std::vector<float> out(size_t(t.numel()));
  const size_t value_bytes = size_t(DTypeBytes(t.dtype));
  for (size_t i = 0; i < out.size(); ++i) out[i] = LoadAsF32(t.dtype, t.data + i * value_bytes);
  return out;
}

namespace {

// Looks tensors up by name; remembers the first problem as one line naming the tensor.
class Binder {
 public:
  // prefix: where the text model's tensors are in a multimodal wrapper ("language_model.").
  Binder(const Checkpoint* ckpt, std::string prefix, std::vector<TensorSpec>* listing = nullptr)
      : ckpt_(ckpt), prefix_(std::move(prefix)), listing_(listing) {}
  const Status& status() const { return status_; }

  WeightMatrix Matrix(const std::string& name, int64_t rows, int64_t cols) {
    const TensorView* t = Get(name, {rows, cols});
    if (t == nullptr) return {};
    return WeightMatrix{t->dtype, rows, cols, t->data};
  }
  std::vector<float> Vector(const std::string& name, int64_t size) {
    const TensorView* t = Get(name, {size});
    if (t == nullptr) return std::vector<float>(size_t(std::max<int64_t>(0, size)), 0.0f);
    return TensorToF32(*t);
  }
  MlpWeights Mlp(const std::string& prefix, int64_t hidden, int64_t inter) {
    return MlpWeights{.gate = Matrix(prefix + ".gate_proj.weight", inter, hidden),
                      .up = Matrix(prefix + ".up_proj.weight", inter, hidden),
                      .down = Matrix(prefix + ".down_proj.weight", hidden, inter)};
  }

 private:
  const TensorView* Get(const std::string& unprefixed_name, std::vector<int64_t> shape) {
    const std::string name = prefix_ + unprefixed_name;
    if (listing_ != nullptr) {
      listing_->push_back(TensorSpec{name, std::move(shape)});
      return nullptr;
    }
    if (!status_.ok()) return nullptr;
    const TensorView* t = ckpt_->Find(name);
    if (t == nullptr) {
      status_ = Status::Error("checkpoint is missing tensor '" + name + "'");
      return nullptr;
    }
    if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16) {
      status_ = Status::Error(t->file + ": tensor '" + name + "' has dtype " + DTypeName(t->dtype) +
                              " (weights must be F32, BF16 or F16)");
      return nullptr;
    }
    if (t->shape != shape) {
      TensorView expected;
      expected.shape = shape;
      status_ = Status::Error(t->file + ": tensor '" + name + "' has shape " + t->ShapeString() +
                              " but the config implies " + expected.ShapeString());
      return nullptr;
    }
    return t;
  }

  const Checkpoint* ckpt_;
  const std::string prefix_;
  std::vector<TensorSpec>* listing_;  // set: record what would be bound instead of binding
  Status status_;
};

AttentionWeights BindAttention(Binder& b, const ModelConfig& c, const std::string& p) {
  const int64_t heads = c.num_attention_heads, hidden = c.hidden_size;
  AttentionWeights a;
  if (c.q_lora_rank > 0) {
    a.q_a = b.Matrix(p + "q_a_proj.weight", c.q_lora_rank, hidden);
    a.q_a_norm = b.Vector(p + "q_a_layernorm.weight", c.q_lora_rank);
    a.q_b = b.Matrix(p + "q_b_proj.weight", heads * c.qk_head_dim(), c.q_lora_rank);
  } else {
    a.q_proj = b.Matrix(p + "q_proj.weight", heads * c.qk_head_dim(), hidden);
  }
  a.kv_a = b.Matrix(p + "kv_a_proj_with_mqa.weight", c.kv_cache_dim(), hidden);
  a.kv_a_norm = b.Vector(p + "kv_a_layernorm.weight", c.kv_lora_rank);
  a.kv_b = b.Matrix(p + "kv_b_proj.weight", heads * (c.qk_nope_head_dim + c.v_head_dim),
                    c.kv_lora_rank);
  a.o_proj = b.Matrix(p + "o_proj.weight", hidden, heads * c.v_head_dim);
  return a;
}

MoeWeights BindMoe(Binder& b, const ModelConfig& c, const std::string& p) {
  MoeWeights m;
  m.router = b.Matrix(p + "gate.weight", c.n_routed_experts, c.hidden_size);
  if (c.topk_method == TopkMethod::kNoauxTc) {
    m.correction_bias = b.Vector(p + "gate.e_score_correction_bias", c.n_routed_experts);
  }
  m.experts.reserve(size_t(c.n_routed_experts));
  for (int e = 0; e < c.n_routed_experts; ++e) {
    m.experts.push_back(
        b.Mlp(p + "experts." + std::to_string(e), c.hidden_size, c.moe_intermediate_size));
  }
  if (c.n_shared_experts > 0) {
    m.has_shared = true;
    m.shared = b.Mlp(p + "shared_experts", c.hidden_size,
                     int64_t(c.n_shared_experts) * c.moe_intermediate_size);
  }
  return m;
}

}  // namespace

namespace {

ModelWeights BindAll(Binder& b, const ModelConfig& c) {
  ModelWeights w;
  w.embed = b.Matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size);
  w.lm_head = c.tie_word_embeddings ? w.embed
                                    : b.Matrix("lm_head.weight", c.vocab_size, c.hidden_size);
  w.final_norm = b.Vector("model.norm.weight", c.hidden_size);
  w.layers.resize(size_t(c.num_hidden_layers));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& layer = w.layers[size_t(i)];
    layer.input_norm = b.Vector(p + "input_layernorm.weight", c.hidden_size);
    layer.post_attn_norm = b.Vector(p + "post_attention_layernorm.weight", c.hidden_size);
    layer.attn = BindAttention(b, c, p + "self_attn.");
    layer.is_moe = c.IsMoeLayer(i);
    if (layer.is_moe) {
      layer.moe = BindMoe(b, c, p + "mlp.");
    } else {
      layer.mlp = b.Mlp(p + "mlp", c.hidden_size, c.intermediate_size);
    }
  }
  return w;
}

}  // namespace

Result<ModelWeights> BindWeights(const ModelConfig& c, const Checkpoint& checkpoint) {
  Binder b(&checkpoint, c.tensor_prefix);
  ModelWeights w = BindAll(b, c);
  if (!b.status().ok()) return b.status();
  return w;
}

namespace {

// Every matrix MatMul reads, in a fixed order.
template <typename Visit>
void ForEachMatMulMatrix(ModelWeights& w, Visit&& visit) {
  visit(w.lm_head);
  for (LayerWeights& layer : w.layers) {
    AttentionWeights& a = layer.attn;
    for (WeightMatrix* m : {&a.q_a, &a.q_b, &a.q_proj, &a.kv_a, &a.o_proj}) {
      if (m->data != nullptr) visit(*m);
    }
    auto mlp = [&](MlpWeights& m) {
      visit(m.gate);
      visit(m.up);
      visit(m.down);
    };
    if (layer.is_moe) {
      visit(layer.moe.router);
      for (MlpWeights& e : layer.moe.experts) mlp(e);
      if (layer.moe.has_shared) mlp(layer.moe.shared);
    } else {
      mlp(layer.mlp);
    }
  }
}

}  // namespace

void PackWeights(ModelWeights& w, ThreadPool& pool) {
  size_t total = 0;
  ForEachMatMulMatrix(w, [&](WeightMatrix& m) { total += PackedBytes(m); });
  w.packed_storage.assign(total, std::byte{0});
  size_t offset = 0;
  ForEachMatMulMatrix(w, [&](WeightMatrix& m) {
    const size_t bytes = PackedBytes(m);
    m = PackPanels(m, w.packed_storage.data() + offset, pool);
    offset += bytes;
  });
}

std::vector<TensorSpec> ListWeightTensors(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  Binder b(nullptr, c.tensor_prefix, &specs);
  BindAll(b, c);
  return specs;
}

}  // namespace mlaserve
