#include "model/gguf_export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/float16.h"
#include "core/read_file.h"
#include "model/config.h"
#include "model/gguf_model.h"
#include "model/gguf_writer.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tiktoken_merges.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

// Owns converted tensor bytes until the writer has written them.
class Buffers {
 public:
  std::vector<std::byte>& New(size_t bytes) {
    owned_.push_back(std::make_unique<std::vector<std::byte>>(bytes));
    return *owned_.back();
  }

 private:
  std::vector<std::unique_ptr<std::vector<std::byte>>> owned_;
};

// Bytes of `count` values stored as `type` (whole blocks).
size_t StoredBytes(GgmlType type, size_t count) {
  const GgmlTypeTraits traits = GgmlTraits(uint32_t(type));
  return count / size_t(traits.block_elements) * size_t(traits.block_bytes);
}


// Q8_0 as llama.cpp's reference quantizer writes it: per block of 32, d = max |x| / 127 (stored
// as fp16), codes round(x / d) with the fp32 d.
void EncodeQ8_0(std::span<const float> x, std::byte* dst) {
  constexpr size_t kValues = kQ8_0Values;
  for (size_t b = 0; b < x.size() / kValues; ++b) {
    const float* v = x.data() + b * kValues;
    float amax = 0.0f;
    for (size_t i = 0; i < kValues; ++i) amax = std::max(amax, std::abs(v[i]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = F32ToF16(d);
    std::byte* block = dst + b * kQ8_0Bytes;
    std::memcpy(block, &h, 2);
    for (size_t i = 0; i < kValues; ++i) block[2 + i] = std::byte(int8_t(std::lround(v[i] * id)));
  }
}

// Q6_K (ggml's block_q6_K: ql[128], qh[64], int8 scales[16], fp16 d; layout as SplitQ6_K in
// model/gguf_checkpoint.cc reads it), by a plain rule rather than llama.cpp's error-minimizing
// search: each sub-block of 16 takes the scale s_j = (its value of largest magnitude) / -32, the
// super-block d = (the s_j of largest magnitude) / -128 (stored as fp16), scales[j] =
// min(127, round(s_j / d)), and every code q = clamp(round(x / (d * scales[j])), -32, 31) + 32.
void EncodeQ6_K(std::span<const float> x, std::byte* dst) {
  for (size_t b = 0; b < x.size() / 256; ++b) {
    const float* v = x.data() + b * 256;
    float sub[16], largest = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float extreme = 0.0f;
      for (int i = 0; i < 16; ++i) {
        if (std::abs(v[16 * j + i]) > std::abs(extreme)) extreme = v[16 * j + i];
      }
      sub[j] = extreme / -32.0f;
      if (std::abs(sub[j]) > std::abs(largest)) largest = sub[j];
    }
    const uint16_t d_bits = F32ToF16(largest / -128.0f);
    const float d = F16ToF32(d_bits);
    uint8_t ql[128] = {}, qh[64] = {};
    int8_t scales[16];
    for (int j = 0; j < 16; ++j) {
      scales[j] = int8_t(d != 0.0f ? std::clamp<long>(std::lround(sub[j] / d), -128, 127) : 0);
      const float step = d * float(scales[j]);
      for (int i = 0; i < 16; ++i) {
        const int e = 16 * j + i;
        const long q = step != 0.0f ? std::clamp<long>(std::lround(v[e] / step), -32, 31) + 32 : 32;
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        ql[64 * h + 32 * (k % 2) + l] |= uint8_t((q & 0xF) << (4 * (k / 2)));
        qh[32 * h + l] |= uint8_t((q >> 4) << (2 * k));
      }
    }
    std::byte* block = dst + b * 210;
    std::memcpy(block, ql, 128);
    std::memcpy(block + 128, qh, 64);
    std::memcpy(block + 192, scales, 16);
    std::memcpy(block + 208, &d_bits, 2);
  }
}

// Q4_K (ggml's block_q4_K: fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins, qs[128]; Q5_K
// adds qh[32] before qs; layout
// as SplitQ4_K in model/gguf_checkpoint.cc reads it), by a plain rule rather than llama.cpp's
// error-minimizing search: each sub-block of 32 spans [lo, hi] with lo = min(0, its least value),
// scale (hi - lo) / 15 (Q5_K: 31) and min -lo; d and dmin = the largest scale and min / 63 (fp16), the 6-bit
// scale and min = round(scale / d), round(min / dmin), and each code q = clamp(round((x + dmin *
// min) / (d * scale)), 0, 15 (31)).
// Q4_K and Q5_K share it: `levels` 15 or 31, Q5_K's fifth bits into qh (bit 2i + half of qh[l]
// for value 64i + 32 half + l), the low nibbles into qs as Q4_K's.
void EncodeKWithMins(std::span<const float> x, int levels, std::byte* dst) {
  const bool q5 = levels == 31;
  const size_t block_bytes = q5 ? 176 : 144;
  for (size_t b = 0; b < x.size() / 256; ++b) {
    const float* v = x.data() + b * 256;
    float scale[8], min[8], largest_scale = 0.0f, largest_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      float lo = 0.0f, hi = v[32 * j];
      for (int i = 0; i < 32; ++i) {
        lo = std::min(lo, v[32 * j + i]);
        hi = std::max(hi, v[32 * j + i]);
      }
      scale[j] = (hi - lo) / float(levels);
      min[j] = -lo;
      largest_scale = std::max(largest_scale, scale[j]);
      largest_min = std::max(largest_min, min[j]);
    }
    const uint16_t d_bits = F32ToF16(largest_scale / 63.0f), dmin_bits = F32ToF16(largest_min / 63.0f);
    const float d = F16ToF32(d_bits), dmin = F16ToF32(dmin_bits);
    uint8_t sc[8], mn[8], packed_scales[12] = {}, qs[128] = {}, qh[32] = {};
    for (int j = 0; j < 8; ++j) {
      sc[j] = uint8_t(d > 0.0f ? std::clamp<long>(std::lround(scale[j] / d), 0, 63) : 0);
      mn[j] = uint8_t(dmin > 0.0f ? std::clamp<long>(std::lround(min[j] / dmin), 0, 63) : 0);
    }
    for (int j = 0; j < 4; ++j) {
      packed_scales[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
      packed_scales[j + 4] = uint8_t((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
      packed_scales[j + 8] = uint8_t((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
    for (int e = 0; e < 256; ++e) {
      const int j = e / 32;
      const float step = d * float(sc[j]), offset = dmin * float(mn[j]);
      const long q = step > 0.0f ? std::clamp<long>(std::lround((v[e] + offset) / step), 0, levels) : 0;
      const int i = e / 64, half = (e % 64) / 32, l = e % 32;
      qs[32 * i + l] |= uint8_t((q & 0xF) << (4 * half));
      if (q5) qh[l] |= uint8_t((q >> 4) << (2 * i + half));
    }
    std::byte* block = dst + b * block_bytes;
    std::memcpy(block, &d_bits, 2);
    std::memcpy(block + 2, &dmin_bits, 2);
    std::memcpy(block + 4, packed_scales, 12);
    if (q5) std::memcpy(block + 16, qh, 32);
    std::memcpy(block + (q5 ? 48 : 16), qs, 128);
  }
}

// Q4_0, Q4_1, Q5_0 and Q5_1 as llama.cpp's reference quantizers write them, per block of 32:
// Q4_0 / Q5_0 d = (largest-magnitude value) / -8 (-16), codes min(15, trunc(x / d + 8.5)) (31,
// 16.5); Q4_1 / Q5_1 d = (max - min) / 15 (31), m = min, codes trunc((x - min) / d + 0.5) (at
// most 15 / 31). Value j in the low nibble of qs[j], value j + 16 in its high nibble; their fifth
// bits are bits j and j + 16 of qh.
void EncodeLegacy32(std::span<const float> x, GgmlType type, std::byte* dst) {
  const bool with_m = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  const bool five = type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1;
  const int top = five ? 31 : 15;
  const float half = float(top + 1) / 2.0f;  // the symmetric types' zero code
  const size_t block_bytes = size_t(GgmlTraits(uint32_t(type)).block_bytes);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float* v = x.data() + b * 32;
    float d, m = 0.0f;
    if (with_m) {
      const auto [lo, hi] = std::minmax_element(v, v + 32);
      d = (*hi - *lo) / float(top);
      m = *lo;
    } else {
      float extreme = 0.0f;
      for (int i = 0; i < 32; ++i) {
        if (std::abs(v[i]) > std::abs(extreme)) extreme = v[i];
      }
      d = extreme / -half;
    }
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t qs[16] = {};
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) {
      const int q = with_m ? std::min(top, int(uint8_t(std::max(0.0f, (v[j] - m) * id + 0.5f))))
                           : std::min(top, int(int8_t(v[j] * id + half + 0.5f)));
      qs[j % 16] |= uint8_t((q & 0xF) << (4 * (j / 16)));
      if (five) qh |= uint32_t((q >> 4) & 1) << j;
    }
    std::byte* block = dst + b * block_bytes;
    const uint16_t d_bits = F32ToF16(d), m_bits = F32ToF16(m);
    std::memcpy(block, &d_bits, 2);
    size_t at = 2;
    if (with_m) {
      std::memcpy(block + at, &m_bits, 2);
      at += 2;
    }
    if (five) {
      std::memcpy(block + at, &qh, 4);
      at += 4;
    }
    std::memcpy(block + at, qs, 16);
  }
}

// The type a matrix whose rows hold `cols` values is written in: `type`, unless its blocks do not
// divide the rows (a K type's 256 past e.g. 1408 columns), then Q8_0 (llama.cpp falls back from
// Q6_K the same way, from Q4_K to Q5_0, which mlaserve does not compute).
GgmlType TypeForRows(GgmlType type, int64_t cols) {
  return cols % GgmlTraits(uint32_t(type)).block_elements == 0 ? type : GgmlType::kQ8_0;
}

// Values stored as `type` (rows of whole blocks) into dst, StoredBytes(type, x.size()) bytes.
void Encode(std::span<const float> x, GgmlType type, std::byte* dst) {
  if (type == GgmlType::kQ8_0) return EncodeQ8_0(x, dst);
  if (type == GgmlType::kQ6_K) return EncodeQ6_K(x, dst);
  if (type == GgmlType::kQ4_K) return EncodeKWithMins(x, 15, dst);
  if (type == GgmlType::kQ5_K) return EncodeKWithMins(x, 31, dst);
  if (type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1) {
    return EncodeLegacy32(x, type, dst);
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (type == GgmlType::kF32) {
      std::memcpy(dst + i * 4, &x[i], 4);
    } else {
      const uint16_t bits = type == GgmlType::kBF16 ? F32ToBf16(x[i]) : F32ToF16(x[i]);
      std::memcpy(dst + i * 2, &bits, 2);
    }
  }
}

bool Same(DType d, GgmlType g) {
  return (d == DType::kF32 && g == GgmlType::kF32) || (d == DType::kBF16 && g == GgmlType::kBF16) ||
         (d == DType::kF16 && g == GgmlType::kF16);
}

std::span<const std::byte> Encoded(std::span<const float> x, GgmlType type, Buffers& buffers) {
  std::vector<std::byte>& out = buffers.New(StoredBytes(type, x.size()));
  Encode(x, type, out.data());
  return out;
}

// The tensor's bytes as `type`: a view of the checkpoint when they already are, else converted.
std::span<const std::byte> AsType(const TensorView& t, GgmlType type, Buffers& buffers) {
  if (Same(t.dtype, type)) return {t.data, t.num_bytes};
  return Encoded(TensorToF32(t), type, buffers);
}

Status WriteModelMetadata(const ModelConfig& c, bool split_kv_b, GgufWriter& w) {
  if (c.moe_layer_freq != 1) return Status::Error("moe_layer_freq " + std::to_string(c.moe_layer_freq) + " has no GGUF key");
  const std::string a = "deepseek2.";
  w.SetString("general.architecture", "deepseek2");
  w.SetString("general.name", c.model_type);
  w.SetU32(a + "block_count", uint32_t(c.num_hidden_layers));
  w.SetU32(a + "context_length", uint32_t(c.max_position_embeddings));
  w.SetU32(a + "embedding_length", uint32_t(c.hidden_size));
  w.SetU32(a + "feed_forward_length", uint32_t(c.intermediate_size));
  w.SetU32(a + "attention.head_count", uint32_t(c.num_attention_heads));
  w.SetU32(a + "attention.head_count_kv", split_kv_b ? 1u : uint32_t(c.num_attention_heads));
  w.SetF32(a + "rope.freq_base", float(c.rope_theta));
  w.SetF32(a + "attention.layer_norm_rms_epsilon", float(c.rms_norm_eps));
  w.SetU32(a + "vocab_size", uint32_t(c.vocab_size));
  if (c.q_lora_rank > 0) w.SetU32(a + "attention.q_lora_rank", uint32_t(c.q_lora_rank));
  w.SetU32(a + "attention.kv_lora_rank", uint32_t(c.kv_lora_rank));
  if (split_kv_b) {  // newer files: the latent's sizes, and the decompressed heads' in *_mla
    w.SetU32(a + "attention.key_length", uint32_t(c.kv_cache_dim()));
    w.SetU32(a + "attention.value_length", uint32_t(c.kv_lora_rank));
    w.SetU32(a + "attention.key_length_mla", uint32_t(c.qk_head_dim()));
    w.SetU32(a + "attention.value_length_mla", uint32_t(c.v_head_dim));
  } else {
    w.SetU32(a + "attention.key_length", uint32_t(c.qk_head_dim()));
    w.SetU32(a + "attention.value_length", uint32_t(c.v_head_dim));
  }
  w.SetU32(a + "rope.dimension_count", uint32_t(c.qk_rope_head_dim));
  if (c.n_routed_experts > 0) {
    w.SetU32(a + "leading_dense_block_count", uint32_t(c.first_k_dense_replace));
    w.SetU32(a + "expert_feed_forward_length", uint32_t(c.moe_intermediate_size));
    w.SetU32(a + "expert_count", uint32_t(c.n_routed_experts));
    w.SetU32(a + "expert_shared_count", uint32_t(c.n_shared_experts));
    w.SetU32(a + "expert_used_count", uint32_t(c.num_experts_per_tok));
    w.SetF32(a + "expert_weights_scale", float(c.routed_scaling_factor));
    w.SetBool(a + "expert_weights_norm", c.norm_topk_prob);
    w.SetU32(a + "expert_gating_func", c.scoring_func == ScoringFunc::kSigmoid ? 2u : 1u);
    if (c.n_group > 1) {
      w.SetU32(a + "expert_group_count", uint32_t(c.n_group));
      w.SetU32(a + "expert_group_used_count", uint32_t(c.topk_group));
    }
  }
  if (c.yarn.enabled) {
    w.SetString(a + "rope.scaling.type", "yarn");
    w.SetF32(a + "rope.scaling.factor", float(c.yarn.factor));
    w.SetU32(a + "rope.scaling.original_context_length", uint32_t(c.yarn.original_max_position_embeddings));
    w.SetF32(a + "rope.scaling.yarn_log_multiplier", float(0.1 * c.yarn.mscale_all_dim));
    w.SetF32(a + "rope.scaling.yarn_beta_fast", float(c.yarn.beta_fast));
    w.SetF32(a + "rope.scaling.yarn_beta_slow", float(c.yarn.beta_slow));
  }
  return Status::Ok();
}

// The vocabulary, token types and merges of a byte-level BPE tokenizer.json; `pre` its GGUF
// pre-tokenizer name.
Status ReadTokenizerJsonVocab(const std::string& model_dir, int64_t vocab_size, std::vector<std::string>& tokens,
                              std::vector<int32_t>& types, std::vector<std::string>& merges, std::string& pre) {
  auto text = ReadWholeFile(model_dir + "/tokenizer.json");
  if (!text.ok()) return text.status();
  const json t = json::parse(*text, nullptr, false);
  if (t.is_discarded() || !t.contains("model") || t["model"].value("type", "") != "BPE") {
    return Status::Error(model_dir + "/tokenizer.json: not a BPE tokenizer.json");
  }
  auto name = GgufPreTokenizerName(t.value("pre_tokenizer", json()));
  if (!name) return Status::Error(model_dir + "/tokenizer.json: its pre_tokenizer has no GGUF name (gpt-2, deepseek-v3)");
  pre = *name;
  for (const auto& [token, id] : t["model"]["vocab"].items()) {
    if (id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size) {
      tokens[size_t(id.get<int64_t>())] = token;
      types[size_t(id.get<int64_t>())] = 1;
    }
  }
  for (const json& added : t.value("added_tokens", json::array())) {
    const int64_t id = added.value("id", int64_t(-1));
    if (id < 0 || id >= vocab_size) continue;
    tokens[size_t(id)] = added.value("content", "");
    types[size_t(id)] = added.value("special", false) ? 3 : 4;
  }
  for (const json& m : t["model"].value("merges", json::array())) {
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  return Status::Ok();
}

// tokenizer.ggml.* from the model directory's tokenizer.json (byte-level BPE) or Kimi's
// tiktoken.model, and its config.
Status WriteTokenizerMetadata(const std::string& model_dir, const ModelConfig& c, GgufWriter& w) {
  auto tokenizer = Tokenizer::FromDirectory(model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  std::vector<std::string> tokens(size_t(c.vocab_size));
  std::vector<int32_t> types(size_t(c.vocab_size), 5);  // 5: unused (padding past the vocabulary)
  for (size_t id = 0; id < tokens.size(); ++id) tokens[id] = "[PAD" + std::to_string(id) + "]";
  std::vector<std::string> merges;
  std::string pre;
  if (!std::filesystem::exists(model_dir + "/tokenizer.json") &&
      std::filesystem::exists(model_dir + "/tiktoken.model")) {
    TiktokenByteLevelVocab(*tokenizer, c.vocab_size, tokens, types, merges);
    pre = "kimi-k2";
  } else {
    MLA_RETURN_IF_ERROR(ReadTokenizerJsonVocab(model_dir, c.vocab_size, tokens, types, merges, pre));
  }
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", pre);
  w.SetStrings("tokenizer.ggml.tokens", tokens);
  w.SetI32s("tokenizer.ggml.token_type", types);
  w.SetStrings("tokenizer.ggml.merges", merges);
  if (auto bos = tokenizer->bos_id()) w.SetU32("tokenizer.ggml.bos_token_id", uint32_t(*bos));
  if (auto eos = tokenizer->eos_id()) w.SetU32("tokenizer.ggml.eos_token_id", uint32_t(*eos));
  w.SetBool("tokenizer.ggml.add_bos_token", tokenizer->add_bos());
  auto chat_template = ChatTemplate::ForModel(model_dir, "", *tokenizer, c.model_type);
  if (!chat_template.ok()) return chat_template.status();
  if (chat_template->is_jinja()) w.SetString("tokenizer.chat_template", chat_template->source());
  return Status::Ok();
}

}  // namespace

Result<GgufExportReport> WriteGgufCheckpoint(const std::string& model_dir, const std::string& out_path,
                                             const GgufExportOptions& options) {
  const GgmlType mt = options.matrix_type;
  const bool quantized =
      mt == GgmlType::kQ8_0 || mt == GgmlType::kQ6_K || mt == GgmlType::kQ5_K || mt == GgmlType::kQ4_K ||
      mt == GgmlType::kQ4_0 || mt == GgmlType::kQ4_1 || mt == GgmlType::kQ5_0 || mt == GgmlType::kQ5_1;
  if (mt != GgmlType::kF32 && mt != GgmlType::kF16 && mt != GgmlType::kBF16 && !quantized) {
    return Status::Error("GGUF export writes F32, F16, BF16, Q8_0, Q6_K, Q5_K, Q5_1, Q5_0, Q4_K, Q4_1 or Q4_0 matrices");
  }
  auto config = LoadModelConfig(model_dir);
  if (!config.ok()) return config.status();
  const ModelConfig& c = *config;
  if (c.quant.method != WeightQuantMethod::kNone || !c.tensor_prefix.empty()) {
    return Status::Error(model_dir + ": GGUF export reads a dense DeepSeek checkpoint (no quantization_config, no "
                         "multimodal wrapper)");
  }
  auto checkpoint = Checkpoint::Open(model_dir);
  if (!checkpoint.ok()) return checkpoint.status();
  GgufWriter w;
  MLA_RETURN_IF_ERROR(WriteModelMetadata(c, options.split_kv_b, w));
  MLA_RETURN_IF_ERROR(WriteTokenizerMetadata(model_dir, c, w));

  Buffers buffers;
  GgufExportReport report;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, GgmlType type, std::span<const std::byte> bytes) {
    ++report.num_tensors;
    report.output_bytes += bytes.size();
    return w.AddTensor(name, std::move(ne), type, bytes);
  };
  // Whole tensors, in name order; experts and the split kv_b below.
  for (const auto& [name, t] : (*checkpoint)->tensors()) {
    const std::string layers = "model.layers.";
    if (name.rfind(layers, 0) == 0 && std::stoi(name.substr(layers.size())) >= c.num_hidden_layers) continue;  // MTP
    if (name.find(".mlp.experts.") != std::string::npos) continue;
    if (options.split_kv_b && name.ends_with("kv_b_proj.weight")) continue;
    const auto gguf = GgufNameOfHfTensor(name);
    if (!gguf) return Status::Error(model_dir + ": tensor " + name + " has no GGUF name");
    // Vectors in F32, as llama.cpp's converter stores them. (It stores the router in F32 too; here
    // it stays in a float matrix type, so that a bf16 file's router runs the original's kernels;
    // with Q8_0 matrices it is F32, as llama.cpp's.)
    const bool router = name.ends_with(".mlp.gate.weight");
    const GgmlType type = t.shape.size() == 1 || (router && quantized) ? GgmlType::kF32 : TypeForRows(mt, t.shape.back());
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    MLA_RETURN_IF_ERROR(add(*gguf, std::move(ne), type, AsType(t, type, buffers)));
  }
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    const std::string blk = "blk." + std::to_string(layer) + ".";
    if (c.IsMoeLayer(layer)) {
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const int64_t rows = std::string(proj) == "down_proj" ? c.hidden_size : c.moe_intermediate_size;
        const int64_t cols = std::string(proj) == "down_proj" ? c.moe_intermediate_size : c.hidden_size;
        const GgmlType type = TypeForRows(mt, cols);
        const size_t expert_bytes = StoredBytes(type, size_t(rows * cols));
        std::vector<std::byte>& stacked = buffers.New(expert_bytes * size_t(c.n_routed_experts));
        for (int e = 0; e < c.n_routed_experts; ++e) {
          const std::string name = HfExpertTensorName(layer, e, proj);
          const TensorView* t = (*checkpoint)->Find(name);
          if (t == nullptr || t->shape != std::vector<int64_t>{rows, cols}) {
            return Status::Error(model_dir + ": tensor " + name + " is missing or not " + std::to_string(rows) + " x " +
                                 std::to_string(cols));
          }
          // Straight into its slot of the stacked tensor (no second copy).
          std::byte* slot = stacked.data() + size_t(e) * expert_bytes;
          if (Same(t->dtype, type)) std::memcpy(slot, t->data, expert_bytes);
          else Encode(TensorToF32(*t), type, slot);
        }
        MLA_RETURN_IF_ERROR(add(GgufExpertsTensorName(layer, proj), {cols, rows, c.n_routed_experts}, type, stacked));
      }
    }
    if (options.split_kv_b) {
      const TensorView* kv_b = (*checkpoint)->Find(p + "self_attn.kv_b_proj.weight");
      const int64_t heads = c.num_attention_heads, nope = c.qk_nope_head_dim, v = c.v_head_dim, lora = c.kv_lora_rank;
      if (kv_b == nullptr || kv_b->shape != std::vector<int64_t>{heads * (nope + v), lora}) {
        return Status::Error(model_dir + ": layer " + std::to_string(layer) + "'s kv_b_proj is missing or misshapen");
      }
      const std::vector<float> src = TensorToF32(*kv_b);
      std::vector<float> k_b(size_t(heads * lora * nope)), v_b(size_t(heads * v * lora));  // [h][lora][nope], [h][v][lora]
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t j = 0; j < nope; ++j) {
          for (int64_t col = 0; col < lora; ++col) {
            k_b[size_t((h * lora + col) * nope + j)] = src[size_t((h * (nope + v) + j) * lora + col)];
          }
        }
        std::copy_n(src.begin() + (h * (nope + v) + nope) * lora, v * lora, v_b.begin() + h * v * lora);
      }
      // (Each in its own type: k_b's rows are nope values, v_b's kv_lora.)
      const GgmlType k_type = TypeForRows(mt, nope), v_type = TypeForRows(mt, lora);
      MLA_RETURN_IF_ERROR(add(blk + "attn_k_b.weight", {nope, lora, heads}, k_type, Encoded(k_b, k_type, buffers)));
      MLA_RETURN_IF_ERROR(add(blk + "attn_v_b.weight", {lora, v, heads}, v_type, Encoded(v_b, v_type, buffers)));
    }
  }
  if (options.split_max_tensors > 0) {
    const std::string prefix = out_path.ends_with(".gguf") ? out_path.substr(0, out_path.size() - 5) : out_path;
    auto paths = w.WriteSplit(prefix, options.split_max_tensors);
    if (!paths.ok()) return paths.status();
    report.paths = std::move(paths).value();
  } else {
    MLA_RETURN_IF_ERROR(w.Write(out_path));
    report.paths = {out_path};
  }
  return report;
}

}  // namespace mlaserve
