#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>

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
  // prefix: where the text model's tensors are in a multimodal wrapper ("language_model.");
  // names given to Matrix() and Vector() are the text model's own.
  Binder(const Checkpoint* ckpt, std::string prefix, WeightQuantConfig quant,
         std::vector<TensorSpec>* listing = nullptr)
      : ckpt_(ckpt), prefix_(std::move(prefix)), quant_(std::move(quant)), listing_(listing) {}
  const Status& status() const { return status_; }
  // Whether the checkpoint holds `own_name` (false when listing: a listing names the Hugging Face
  // tensors).
  bool Has(const std::string& own_name) const { return listing_ == nullptr && ckpt_->Find(prefix_ + own_name) != nullptr; }

  // A Linear weight `X.weight`: dense, fp8 (`X.weight` F8_E4M3 + `X.weight_scale_inv`), int4
  // (`X.weight_packed` + `X.weight_scale` + `X.weight_shape`), grouped int8 (`X.weight` I8 +
  // `X.weight_scale` F32 [rows, groups]: a GGUF file's Q8_0 or Q6_K, model/gguf_checkpoint.cc), or
  // unsigned codes with mins (`X.weight` I8 nibbles or bytes + `X.weight_scale_min`: Q4_K, Q4_0, Q5_K),
  // as the checkpoint stores it.
  WeightMatrix Matrix(const std::string& own_name, int64_t rows, int64_t cols) {
    const std::string name = prefix_ + own_name;
    if (listing_ == nullptr && status_.ok()) {
      const TensorView* stored = ckpt_->Find(name);
      if (stored != nullptr && stored->dtype == DType::kF8E4M3) return Fp8Matrix(name, *stored, rows, cols);
      if (stored != nullptr && stored->dtype == DType::kI8) {
        if (ckpt_->Find(name + "_scale_min") != nullptr) return MinMatrix(name, *stored, rows, cols);
        return Int8Matrix(name, *stored, rows, cols);
      }
      const std::string base = name.substr(0, name.size() - std::string_view(".weight").size());
      if (stored == nullptr && name.ends_with(".weight")) {
        if (const TensorView* packed = ckpt_->Find(base + ".weight_packed")) {
          return Int4Matrix(base, *packed, rows, cols);
        }
      }
    }
    const TensorView* t = Get(name, {rows, cols});
    if (t == nullptr) return {};
    return WeightMatrix{t->dtype, rows, cols, t->data};
  }
  std::vector<float> Vector(const std::string& own_name, int64_t size) {
    const TensorView* t = Get(prefix_ + own_name, {size});
    if (t == nullptr) return std::vector<float>(size_t(std::max<int64_t>(0, size)), 0.0f);
    return TensorToF32(*t);
  }
  MlpWeights Mlp(const std::string& prefix, int64_t hidden, int64_t inter) {
    return MlpWeights{.gate = Matrix(prefix + ".gate_proj.weight", inter, hidden),
                      .up = Matrix(prefix + ".up_proj.weight", inter, hidden),
                      .down = Matrix(prefix + ".down_proj.weight", hidden, inter)};
  }

 private:
  void Fail(const std::string& message) {
    if (status_.ok()) status_ = Status::Error(message);
  }
  static std::string Shape(std::vector<int64_t> shape) {
    TensorView v;
    v.shape = std::move(shape);
    return v.ShapeString();
  }
  // A companion tensor of a quantized weight, checked for dtype (one of `dtypes`) and shape.
  const TensorView* Companion(const std::string& name, const std::string& of, std::initializer_list<DType> dtypes,
                              const std::vector<int64_t>& shape, const std::string& implied_by) {
    const TensorView* t = ckpt_->Find(name);
    if (t == nullptr) {
      Fail("checkpoint is missing tensor '" + name + "' (needed by the quantized '" + of + "')");
      return nullptr;
    }
    if (std::find(dtypes.begin(), dtypes.end(), t->dtype) == dtypes.end()) {
      std::string allowed;
      for (DType d : dtypes) allowed += std::string(allowed.empty() ? "" : " or ") + DTypeName(d);
      Fail(t->file + ": tensor '" + name + "' has dtype " + DTypeName(t->dtype) + " (expected " + allowed + ")");
      return nullptr;
    }
    if (t->shape != shape) {
      Fail(t->file + ": tensor '" + name + "' has shape " + t->ShapeString() + " but " + implied_by + " implies " +
           Shape(shape));
      return nullptr;
    }
    return t;
  }

  WeightMatrix Fp8Matrix(const std::string& name, const TensorView& t, int64_t rows, int64_t cols) {
    if (quant_.method != WeightQuantMethod::kFp8Block) {
      Fail(t.file + ": tensor '" + name + "' is F8_E4M3 but config.json has no fp8 quantization_config "
                    "(quant_method fp8 with weight_block_size)");
      return {};
    }
    if (t.shape != std::vector<int64_t>{rows, cols}) {
      Fail(t.file + ": tensor '" + name + "' has shape " + t.ShapeString() + " but the config implies " +
           Shape({rows, cols}));
      return {};
    }
    const int br = quant_.block_rows, bc = quant_.block_cols;
    const std::string block = "weight_block_size [" + std::to_string(br) + ", " + std::to_string(bc) + "]";
    const TensorView* scale = Companion(name + "_scale_inv", name, {DType::kF32},
                                        {(rows + br - 1) / br, (cols + bc - 1) / bc}, block);
    if (scale == nullptr) return {};
    return WeightMatrix{.dtype = DType::kF8E4M3, .rows = rows, .cols = cols, .data = t.data,
                        .format = WeightFormat::kFp8Block, .scales = scale->data, .block_rows = br,
                        .block_cols = bc};
  }

  WeightMatrix Int8Matrix(const std::string& name, const TensorView& t, int64_t rows, int64_t cols) {
    if (t.shape != std::vector<int64_t>{rows, cols}) {
      Fail(t.file + ": tensor '" + name + "' has shape " + t.ShapeString() + " but the config implies " +
           Shape({rows, cols}));
      return {};
    }
    const TensorView* scale = ckpt_->Find(name + "_scale");
    // Groups of a multiple of 4 columns (packed panels hold columns in fours) that divide the row.
    const int64_t groups = scale != nullptr && scale->shape.size() == 2 ? scale->shape[1] : 0;
    if (groups <= 0 || cols % groups != 0 || (cols / groups) % 4 != 0) {
      Fail(t.file + ": tensor '" + name + "' is grouped int8 without an F32 '" + name +
           "_scale' of [rows, groups] with a group size a multiple of 4");
      return {};
    }
    if (Companion(name + "_scale", name, {DType::kF32}, {rows, groups}, "the config") == nullptr) return {};
    return WeightMatrix{.dtype = DType::kI8, .rows = rows, .cols = cols, .data = t.data,
                        .format = WeightFormat::kInt8Group, .scales = scale->data, .block_rows = 1,
                        .block_cols = int(cols / groups)};
  }

  // Unsigned codes with F32 (scale, min) pairs `X.weight_scale_min` [rows, groups, 2]: 4-bit, two
  // a byte (`X.weight` I8 [rows, cols / 2]: a GGUF file's Q4_K, Q4_0) or 8-bit (I8 [rows, cols]:
  // Q5_K), model/gguf_checkpoint.cc.
  WeightMatrix MinMatrix(const std::string& name, const TensorView& t, int64_t rows, int64_t cols) {
    const bool bytes = t.shape == std::vector<int64_t>{rows, cols};
    if (!bytes && (t.shape != std::vector<int64_t>{rows, cols / 2} || cols % 2 != 0)) {
      Fail(t.file + ": tensor '" + name + "' has shape " + t.ShapeString() + " but the config implies " +
           Shape({rows, cols}) + " (or, in 4-bit codes two a byte, " + Shape({rows, cols / 2}) + ")");
      return {};
    }
    const TensorView* pairs = ckpt_->Find(name + "_scale_min");
    // Groups of whole 32-bit words of codes (packed panels hold a lane's codes in words: 8 nibbles
    // or 4 bytes) that divide the row.
    const int64_t groups = pairs->shape.size() == 3 ? pairs->shape[1] : 0;
    const int64_t word = bytes ? 4 : 8;
    if (groups <= 0 || cols % groups != 0 || (cols / groups) % word != 0) {
      Fail(t.file + ": tensor '" + name + "_scale_min' is not [rows, groups, 2] with a group size a multiple of " +
           std::to_string(word));
      return {};
    }
    if (Companion(name + "_scale_min", name, {DType::kF32}, {rows, groups, 2}, "the config") == nullptr) return {};
    return WeightMatrix{.dtype = DType::kI8, .rows = rows, .cols = cols, .data = t.data,
                        .format = bytes ? WeightFormat::kUint8GroupMin : WeightFormat::kUint4GroupMin,
                        .scales = pairs->data, .block_rows = 1, .block_cols = int(cols / groups)};
  }

  WeightMatrix Int4Matrix(const std::string& base, const TensorView& packed, int64_t rows, int64_t cols) {
    const std::string name = base + ".weight_packed";
    if (quant_.method != WeightQuantMethod::kInt4Pack) {
      Fail(packed.file + ": tensor '" + name + "' is pack-quantized int4 but config.json has no "
                         "compressed-tensors quantization_config");
      return {};
    }
    const int group = quant_.group_size;
    if (cols % 8 != 0 || cols % group != 0) {
      Fail("tensor '" + name + "': " + std::to_string(cols) + " input features are not a multiple of 8 and of group_size " +
           std::to_string(group));
      return {};
    }
    if (ckpt_->Find(base + ".weight_zero_point") != nullptr) {
      Fail("tensor '" + base + ".weight_zero_point': asymmetric (zero-point) int4 is not supported");
      return {};
    }
    const std::string implied = "the config (" + std::to_string(rows) + " x " + std::to_string(cols) +
                                ", group_size " + std::to_string(group) + ")";
    if (Companion(name, name, {DType::kI32}, {rows, cols / 8}, implied) == nullptr) return {};
    const TensorView* scale = Companion(base + ".weight_scale", name, {DType::kBF16}, {rows, cols / group}, implied);
    const TensorView* shape = Companion(base + ".weight_shape", name, {DType::kI32, DType::kI64}, {2}, "a 2-D weight");
    if (scale == nullptr || shape == nullptr) return {};
    int64_t dims[2];
    for (int i = 0; i < 2; ++i) {
      if (shape->dtype == DType::kI64) {
        std::memcpy(&dims[i], shape->data + 8 * i, 8);
      } else {
        int32_t d;
        std::memcpy(&d, shape->data + 4 * i, 4);
        dims[i] = d;
      }
    }
    if (dims[0] != rows || dims[1] != cols) {
      Fail(shape->file + ": tensor '" + base + ".weight_shape' holds " + Shape({dims[0], dims[1]}) +
           " but the config implies " + Shape({rows, cols}));
      return {};
    }
    return WeightMatrix{.dtype = DType::kI32, .rows = rows, .cols = cols, .data = packed.data,
                        .format = WeightFormat::kInt4Group, .scales = scale->data, .block_rows = 1,
                        .block_cols = group};
  }

  const TensorView* Get(const std::string& name, std::vector<int64_t> shape) {
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
  WeightQuantConfig quant_;
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
  if (b.Has(p + "kv_b_proj.weight_k_b")) {  // a GGUF's split pair (the loader drops it beside attn_kv_b)
    a.k_b = b.Matrix(p + "kv_b_proj.weight_k_b", heads * c.kv_lora_rank, c.qk_nope_head_dim);
    a.v_b = b.Matrix(p + "kv_b_proj.weight_v_b", heads * c.v_head_dim, c.kv_lora_rank);
  } else {
    a.kv_b = b.Matrix(p + "kv_b_proj.weight", heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
  }
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

LayerWeights BindLayer(Binder& b, const ModelConfig& c, int index) {
  const std::string p = "model.layers." + std::to_string(index) + ".";
  LayerWeights layer;
  layer.input_norm = b.Vector(p + "input_layernorm.weight", c.hidden_size);
  layer.post_attn_norm = b.Vector(p + "post_attention_layernorm.weight", c.hidden_size);
  layer.attn = BindAttention(b, c, p + "self_attn.");
  layer.is_moe = c.IsMoeLayer(index);
  if (layer.is_moe) {
    layer.moe = BindMoe(b, c, p + "mlp.");
  } else {
    layer.mlp = b.Mlp(p + "mlp", c.hidden_size, c.intermediate_size);
  }
  return layer;
}

MtpWeights BindMtp(Binder& b, const ModelConfig& c) {
  const int index = c.num_hidden_layers;
  const std::string p = "model.layers." + std::to_string(index) + ".";
  MtpWeights m;
  m.enorm = b.Vector(p + "enorm.weight", c.hidden_size);
  m.hnorm = b.Vector(p + "hnorm.weight", c.hidden_size);
  m.eh_proj = b.Matrix(p + "eh_proj.weight", c.hidden_size, 2 * int64_t(c.hidden_size));
  m.block = BindLayer(b, c, index);
  m.head_norm = b.Vector(p + "shared_head.norm.weight", c.hidden_size);
  return m;
}

ModelWeights BindAll(Binder& b, const ModelConfig& c, bool with_mtp) {
  ModelWeights w;
  w.embed = b.Matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size);
  w.lm_head = c.tie_word_embeddings ? w.embed
                                    : b.Matrix("lm_head.weight", c.vocab_size, c.hidden_size);
  w.final_norm = b.Vector("model.norm.weight", c.hidden_size);
  w.layers.reserve(size_t(c.num_hidden_layers));
  for (int i = 0; i < c.num_hidden_layers; ++i) w.layers.push_back(BindLayer(b, c, i));
  if (with_mtp) {
    w.has_mtp = true;
    w.mtp = BindMtp(b, c);
  }
  return w;
}

}  // namespace

Result<ModelWeights> BindWeights(const ModelConfig& c, const Checkpoint& checkpoint, bool with_mtp) {
  if (with_mtp && c.num_nextn_predict_layers <= 0) {
    return Status::Error("the checkpoint has no MTP layer (config.json: num_nextn_predict_layers is 0)");
  }
  Binder b(&checkpoint, c.tensor_prefix, c.quant);
  ModelWeights w = BindAll(b, c, with_mtp);
  if (!b.status().ok()) return b.status();
  return w;
}

namespace {

// Every matrix MatMul reads, in a fixed order.
template <typename Visit>
void ForEachLayerMatrix(LayerWeights& layer, Visit&& visit) {
  AttentionWeights& a = layer.attn;
  for (WeightMatrix* m : {&a.q_a, &a.q_b, &a.q_proj, &a.kv_a, &a.o_proj}) {
    if (m->data != nullptr) visit(*m);
  }
  auto mlp = [&](MlpWeights& m) {
    for (WeightMatrix* x : {&m.gate, &m.up, &m.down}) {
      if (x->data != nullptr) visit(*x);  // (another tensor-parallel rank's expert: empty)
    }
  };
  if (layer.is_moe) {
    visit(layer.moe.router);
    for (MlpWeights& e : layer.moe.experts) mlp(e);
    if (layer.moe.has_shared) mlp(layer.moe.shared);
  } else {
    mlp(layer.mlp);
  }
}

// Every matrix MatMul reads, in a fixed order.
template <typename Visit>
void ForEachMatMulMatrix(ModelWeights& w, Visit&& visit) {
  visit(w.lm_head);
  for (LayerWeights& layer : w.layers) ForEachLayerMatrix(layer, visit);
  if (w.has_mtp) {
    visit(w.mtp.eh_proj);
    ForEachLayerMatrix(w.mtp.block, visit);
  }
}

}  // namespace

Status PackWeights(ModelWeights& w, ThreadPool& pool, const std::function<void(const WeightMatrix&)>& after_each) {
  std::vector<WeightMatrix*> matrices;
  ForEachMatMulMatrix(w, [&](WeightMatrix& m) { matrices.push_back(&m); });
  return PackAll(matrices, w.packed_storage, pool, after_each);
}

std::vector<TensorSpec> ListWeightTensors(const ModelConfig& c, bool with_mtp) {
  std::vector<TensorSpec> specs;
  Binder b(nullptr, c.tensor_prefix, c.quant, &specs);
  BindAll(b, c, with_mtp && c.num_nextn_predict_layers > 0);
  return specs;
}

}  // namespace mlaserve
