// Quantized checkpoints (fp8 block-scaled, compressed-tensors int4): `quantize` / `init-random
// --weights` write the published layouts, they load and compute in their stored format, and every
// malformed or unsupported variant is one line naming what was found.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/read_file.h"
#include "kernels/kernels.h"
#include "kernels/weight_value.h"
#include "model/model.h"
#include "model/safetensors_writer.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::RunMlaserve;
using testing::ShellQuote;
using testing::TempDir;

void InitRandom(const std::string& dir, const std::string& weights, const std::string& extra = "") {
  auto r = RunMlaserve("init-random --preset tiny --weights " + weights + " --out " + ShellQuote(dir) + extra);
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

std::string LoadError(const std::string& dir) {
  auto model = Model::Load(dir, ModelOptions{.max_batch_tokens = 8, .max_context = 64});
  return model.ok() ? std::string() : model.error();
}

void EditConfig(const std::string& dir, const std::function<void(json&)>& edit) {
  auto text = ReadWholeFile(dir + "/config.json");
  ASSERT_TRUE(text.ok());
  json j = json::parse(*text);
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump(2);
}

// Rewrites model.safetensors; `edit` may change a tensor's name, dtype or shape (its bytes become
// zeros of the new size) or drop it (empty name); `extra` tensors (zeros) are appended.
struct TensorEdit {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};
void RewriteTensors(const std::string& dir, const std::function<void(TensorEdit&)>& edit,
                    const std::vector<TensorEdit>& extra = {}) {
  std::vector<std::pair<TensorEdit, std::vector<std::byte>>> out;
  {
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.error();
    for (const auto& [name, t] : (*ckpt)->tensors()) {
      TensorEdit e{name, t.dtype, t.shape};
      edit(e);
      if (e.name.empty()) continue;
      std::vector<std::byte> bytes(t.data, t.data + t.num_bytes);
      if (e.dtype != t.dtype || e.shape != t.shape) {
        size_t n = size_t(DTypeBytes(e.dtype));
        for (int64_t d : e.shape) n *= size_t(d);
        bytes.assign(n, std::byte{0});
      }
      out.emplace_back(e, std::move(bytes));
    }
  }
  for (const TensorEdit& e : extra) {
    size_t n = size_t(DTypeBytes(e.dtype));
    for (int64_t d : e.shape) n *= size_t(d);
    out.emplace_back(e, std::vector<std::byte>(n));
  }
  SafetensorsWriter w(dir + "/model.safetensors");
  for (const auto& [e, bytes] : out) w.Declare(e.name, e.dtype, e.shape);
  ASSERT_TRUE(w.Begin().ok());
  for (const auto& [e, bytes] : out) ASSERT_TRUE(w.Write(bytes.data(), bytes.size()).ok());
  ASSERT_TRUE(w.Finish().ok());
}

const TensorView* Find(const Checkpoint& c, const std::string& name) { return c.Find(name); }

TEST(QuantizedCheckpoint, Fp8BlockWritesDeepSeekLayout) {
  TempDir dir;
  InitRandom(dir.path(), "fp8-block");
  auto config = LoadModelConfig(dir.path());
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_EQ(config->quant.method, WeightQuantMethod::kFp8Block);
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  const std::string p = "model.layers.1.";
  for (const char* linear : {"self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
                             "self_attn.kv_b_proj", "self_attn.o_proj", "mlp.experts.0.gate_proj",
                             "mlp.experts.7.down_proj", "mlp.shared_experts.up_proj"}) {
    const TensorView* w = Find(**ckpt, p + linear + ".weight");
    const TensorView* s = Find(**ckpt, p + linear + ".weight_scale_inv");
    ASSERT_TRUE(w != nullptr && s != nullptr) << linear;
    EXPECT_EQ(w->dtype, DType::kF8E4M3) << linear;
    EXPECT_EQ(s->dtype, DType::kF32) << linear;
    EXPECT_EQ(s->shape, (std::vector<int64_t>{(w->shape[0] + 127) / 128, (w->shape[1] + 127) / 128})) << linear;
  }
  EXPECT_EQ(Find(**ckpt, "model.layers.0.mlp.down_proj.weight")->dtype, DType::kF8E4M3);
  for (const char* kept : {"model.embed_tokens.weight", "lm_head.weight", "model.layers.1.mlp.gate.weight"}) {
    EXPECT_EQ(Find(**ckpt, kept)->dtype, DType::kBF16) << kept;
    EXPECT_EQ(Find(**ckpt, std::string(kept) + "_scale_inv"), nullptr) << kept;
  }
  EXPECT_EQ(Find(**ckpt, "model.layers.1.mlp.gate.e_score_correction_bias")->dtype, DType::kF32);
  EXPECT_EQ(LoadError(dir.path()), "");
}

TEST(QuantizedCheckpoint, Int4WritesCompressedTensorsLayout) {
  TempDir dir;
  InitRandom(dir.path(), "int4-g32");
  auto text = ReadWholeFile(dir.path() + "/config.json");
  ASSERT_TRUE(text.ok());
  const json q = json::parse(*text)["quantization_config"];
  EXPECT_EQ(q["quant_method"], "compressed-tensors");
  EXPECT_EQ(q["format"], "pack-quantized");
  EXPECT_EQ(q["config_groups"]["group_0"]["weights"]["group_size"], 32);
  EXPECT_EQ(q["config_groups"]["group_0"]["weights"]["num_bits"], 4);
  EXPECT_EQ(q["ignore"][0], "lm_head");
  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  const std::string e = "model.layers.1.mlp.experts.2.down_proj";  // [64, 32]
  ASSERT_NE(Find(**ckpt, e + ".weight_packed"), nullptr);
  EXPECT_EQ(Find(**ckpt, e + ".weight_packed")->dtype, DType::kI32);
  EXPECT_EQ(Find(**ckpt, e + ".weight_packed")->shape, (std::vector<int64_t>{64, 4}));
  EXPECT_EQ(Find(**ckpt, e + ".weight_scale")->dtype, DType::kBF16);
  EXPECT_EQ(Find(**ckpt, e + ".weight_scale")->shape, (std::vector<int64_t>{64, 1}));
  EXPECT_EQ(Find(**ckpt, e + ".weight_shape")->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(Find(**ckpt, e + ".weight"), nullptr);
  // Attention, dense MLP and shared experts stay BF16.
  for (const char* kept : {"model.layers.1.self_attn.kv_b_proj.weight", "model.layers.0.mlp.up_proj.weight",
                           "model.layers.1.mlp.shared_experts.down_proj.weight", "lm_head.weight"}) {
    ASSERT_NE(Find(**ckpt, kept), nullptr) << kept;
    EXPECT_EQ(Find(**ckpt, kept)->dtype, DType::kBF16) << kept;
  }
  EXPECT_EQ(LoadError(dir.path()), "");
}

// An fp8 checkpoint whose heads' W_UK and W_UV rows are whole 128-row bands (nope = v = 128, as
// DeepSeek-V3's) loads with kv_b's per-head copies, and each head's copies multiply as kv_b's own
// rows (the loaded, row-major fp8 matrix, read value by value in double): W_UK^T the query,
// W_UV the latent.
TEST(QuantizedCheckpoint, Fp8KvBWithWholeBandHeadsMultipliesThroughItsCopies) {
  TempDir dir;
  InitRandom(dir.path(), "fp8-block", " --set qk_nope_head_dim=128 --set v_head_dim=128");
  auto model = Model::Load(dir.path(), ModelOptions{.max_batch_tokens = 8, .max_context = 64});
  ASSERT_TRUE(model.ok()) << model.error();
  const ModelConfig& c = (*model)->config();
  const AttentionWeights& a = (*model)->weights().layers[1].attn;
  ASSERT_EQ(a.kv_b.format, WeightFormat::kFp8Block);
  ASSERT_EQ(a.uk_t.size(), size_t(c.num_attention_heads));
  ASSERT_EQ(a.uv.size(), size_t(c.num_attention_heads));
  ASSERT_TRUE(a.uk_t_scales.empty());  // fp8 copies keep their blocks' scales
  const int64_t nope = c.qk_nope_head_dim, v = c.v_head_dim, L = c.kv_lora_rank;
  const KernelSet& k = PortableKernels();  // fp32 products: the plain reference table
  for (int64_t h = 0; h < c.num_attention_heads; ++h) {
    std::vector<float> q(static_cast<size_t>(nope)), o(static_cast<size_t>(L));
    std::vector<float> q_lat(static_cast<size_t>(L)), out(static_cast<size_t>(v));
    for (int64_t d = 0; d < nope; ++d) q[size_t(d)] = std::sin(0.37f * float(d + 11 * h));
    for (int64_t i = 0; i < L; ++i) o[size_t(i)] = std::cos(0.23f * float(i + 7 * h));
    k.matmul_panels(q.data(), 1, a.uk_t[size_t(h)], 0, a.uk_t[size_t(h)].num_panels(), q_lat.data(), L);
    k.matmul_panels(o.data(), 1, a.uv[size_t(h)], 0, a.uv[size_t(h)].num_panels(), out.data(), v);
    const int64_t head_row = h * (nope + v);
    for (int64_t col = 0; col < L; ++col) {
      double want = 0.0, magnitude = 0.0;
      for (int64_t d = 0; d < nope; ++d) {
        const double term = double(q[size_t(d)]) * WeightAt(a.kv_b, head_row + d, col);
        want += term;
        magnitude += std::fabs(term);
      }
      ASSERT_NEAR(q_lat[size_t(col)], want, 1e-5 * magnitude + 1e-30) << "head " << h << " W_UK^T " << col;
    }
    for (int64_t r = 0; r < v; ++r) {
      double want = 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < L; ++i) {
        const double term = double(o[size_t(i)]) * WeightAt(a.kv_b, head_row + nope + r, i);
        want += term;
        magnitude += std::fabs(term);
      }
      ASSERT_NEAR(out[size_t(r)], want, 1e-5 * magnitude + 1e-30) << "head " << h << " W_UV " << r;
    }
  }
}

// Resident weights stay in the stored format: the packed copies take about the checkpoint's bytes.
TEST(QuantizedCheckpoint, PackedWeightsStayQuantized) {
  for (const char* weights : {"fp8-block", "int4-g32"}) {
    TempDir dir;
    InitRandom(dir.path(), weights, " --set hidden_size=256 --set moe_intermediate_size=128 --set intermediate_size=512");
    auto model = Model::Load(dir.path(), ModelOptions{.max_batch_tokens = 8, .max_context = 64});
    ASSERT_TRUE(model.ok()) << model.error();
    const ModelWeights& w = (*model)->weights();
    EXPECT_EQ(w.layers[1].moe.experts[0].gate.format,
              std::string(weights) == "fp8-block" ? WeightFormat::kFp8Block : WeightFormat::kInt4Group);
    // Everything but the embedding (read by rows from the mapping) is packed.
    const size_t checkpoint_bytes = (*model)->checkpoint().total_tensor_bytes() - w.embed.total_bytes();
    EXPECT_LT(double(w.packed_storage.size()), 1.05 * double(checkpoint_bytes)) << weights;
  }
}

TEST(QuantizedCheckpoint, Fp8WithoutQuantizationConfigIsRefused) {
  TempDir dir;
  InitRandom(dir.path(), "fp8-block");
  EditConfig(dir.path(), [](json& j) { j.erase("quantization_config"); });
  const std::string e = LoadError(dir.path());
  EXPECT_NE(e.find("F8_E4M3"), std::string::npos) << e;
  EXPECT_NE(e.find("no fp8 quantization_config"), std::string::npos) << e;
}

TEST(QuantizedCheckpoint, Fp8ScaleErrorsAreNamed) {
  const std::string scale = "model.layers.1.self_attn.o_proj.weight_scale_inv";
  {
    TempDir dir;
    InitRandom(dir.path(), "fp8-block");
    RewriteTensors(dir.path(), [&](TensorEdit& t) { if (t.name == scale) t.shape = {2, 1}; });
    const std::string e = LoadError(dir.path());
    EXPECT_NE(e.find(scale), std::string::npos) << e;
    EXPECT_NE(e.find("weight_block_size [128, 128] implies [1, 1]"), std::string::npos) << e;
  }
  {
    TempDir dir;
    InitRandom(dir.path(), "fp8-block");
    RewriteTensors(dir.path(), [&](TensorEdit& t) { if (t.name == scale) t.name.clear(); });
    const std::string e = LoadError(dir.path());
    EXPECT_NE(e.find("missing tensor '" + scale + "'"), std::string::npos) << e;
  }
  {
    TempDir dir;
    InitRandom(dir.path(), "fp8-block");
    RewriteTensors(dir.path(), [&](TensorEdit& t) { if (t.name == scale) t.dtype = DType::kBF16; });
    const std::string e = LoadError(dir.path());
    EXPECT_NE(e.find("has dtype BF16 (expected F32)"), std::string::npos) << e;
  }
}

TEST(QuantizedCheckpoint, Int4TensorErrorsAreNamed) {
  const std::string base = "model.layers.1.mlp.experts.0.up_proj";
  {  // packed int4 tensors without the config block
    TempDir dir;
    InitRandom(dir.path(), "int4-g32");
    EditConfig(dir.path(), [](json& j) { j.erase("quantization_config"); });
    const std::string e = LoadError(dir.path());
    EXPECT_NE(e.find(base.substr(0, 26)), std::string::npos) << e;
    EXPECT_NE(e.find("no compressed-tensors quantization_config"), std::string::npos) << e;
  }
  {  // a zero point: asymmetric
    TempDir dir;
    InitRandom(dir.path(), "int4-g32");
    RewriteTensors(dir.path(), [](TensorEdit&) {}, {{base + ".weight_zero_point", DType::kI32, {32, 1}}});
    const std::string e = LoadError(dir.path());
    EXPECT_NE(e.find("asymmetric (zero-point) int4 is not supported"), std::string::npos) << e;
  }
  {  // a wrong scale shape
    TempDir dir;
    InitRandom(dir.path(), "int4-g32");
    RewriteTensors(dir.path(), [&](TensorEdit& t) { if (t.name == base + ".weight_scale") t.shape = {32, 4}; });
    const std::string e = LoadError(dir.path());
    EXPECT_NE(e.find(base + ".weight_scale' has shape [32, 4]"), std::string::npos) << e;
  }
  {  // weight_shape disagreeing with the config
    TempDir dir;
    InitRandom(dir.path(), "int4-g32");
    RewriteTensors(dir.path(), [&](TensorEdit& t) { if (t.name == base + ".weight_shape") t.dtype = DType::kI32; });
    const std::string e = LoadError(dir.path());
    EXPECT_NE(e.find(base + ".weight_shape' holds [0, 0]"), std::string::npos) << e;
  }
}

TEST(QuantizedCheckpoint, UnsupportedQuantizationConfigsAreOneLine) {
  auto text = ReadWholeFile(std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/configs/deepseek-v3.json");
  ASSERT_TRUE(text.ok());
  const json base = json::parse(*text);
  const json int4_group = {{"weights",
                            {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"},
                             {"group_size", 32}, {"actorder", nullptr}, {"dynamic", false}}},
                           {"input_activations", nullptr}, {"targets", {"Linear"}}};
  auto ct = [&](const std::function<void(json&)>& edit) {
    json q = {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"},
              {"config_groups", {{"group_0", int4_group}}}, {"ignore", {"lm_head"}}};
    edit(q);
    return q;
  };
  struct Case {
    json quantization_config;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{{"quant_method", "awq"}, {"bits", 4}}, "quant_method 'awq' is not supported"},
      {{{"quant_method", "gptq"}, {"bits", 4}}, "quant_method 'gptq' is not supported"},
      {{{"quant_method", "mxfp4"}}, "quant_method 'mxfp4' is not supported"},
      {{{"quant_method", "bitsandbytes"}}, "quant_method 'bitsandbytes' is not supported"},
      {{{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}}, "fp8 without weight_block_size"},
      {{{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"weight_block_size", {128, 128}}},
       "activation_scheme 'static' is not supported"},
      {{{"quant_method", "fp8"}, {"fmt", "e5m2"}, {"weight_block_size", {128, 128}}}, "fmt 'e5m2' is not supported"},
      {{{"quant_method", "fp8"}, {"weight_block_size", {100, 128}}}, "weight_block_size rows 100 is not supported"},
      {ct([](json& q) { q["config_groups"]["group_0"]["weights"]["symmetric"] = false; }),
       "asymmetric (zero-point) int4 is not supported"},
      {ct([](json& q) { q["config_groups"]["group_0"]["weights"]["num_bits"] = 8; }), "num_bits 8 is not supported (4)"},
      {ct([](json& q) { q["config_groups"]["group_0"]["weights"]["actorder"] = "group"; }), "act-order int4 is not supported"},
      // The int4 kernels read column pairs that must not straddle two groups.
      {ct([](json& q) { q["config_groups"]["group_0"]["weights"]["group_size"] = 33; }),
       "group_size must be a positive even integer"},
      {ct([](json& q) { q["config_groups"]["group_0"]["weights"]["type"] = "float"; }), "type 'float' is not supported"},
      {ct([](json& q) { q["config_groups"]["group_0"]["weights"]["strategy"] = "channel"; }),
       "strategy 'channel' is not supported"},
      {ct([](json& q) { q["format"] = "nvfp4-pack-quantized"; }), "format 'nvfp4-pack-quantized' is not supported"},
      {ct([](json& q) { q["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}}; }),
       "activation quantization is not supported"},
  };
  for (const Case& c : cases) {
    json j = base;
    j["quantization_config"] = c.quantization_config;
    auto parsed = ParseModelConfig(j.dump(), "config.json");
    ASSERT_FALSE(parsed.ok()) << c.expected;
    EXPECT_NE(parsed.error().find(c.expected), std::string::npos) << parsed.error();
    EXPECT_EQ(parsed.error().find('\n'), std::string::npos) << parsed.error();
  }
  // Accepted: the format at the top level, or per group under "mixed".
  for (const json& q : {ct([](json&) {}), ct([](json& q) {
                          q["format"] = "mixed";
                          q["config_groups"]["group_0"]["format"] = "pack-quantized";
                        })}) {
    json good = base;
    good["quantization_config"] = q;
    auto parsed = ParseModelConfig(good.dump(), "config.json");
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->quant.method, WeightQuantMethod::kInt4Pack);
    EXPECT_EQ(parsed->quant.group_size, 32);
  }
}

TEST(QuantizedCheckpoint, QuantizeRefusesQuantizedInputAndOddGroups) {
  TempDir dir, out;
  InitRandom(dir.path(), "fp8-block");
  auto r = RunMlaserve("quantize --model-path " + ShellQuote(dir.path()) + " --out " + ShellQuote(out.path()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("already has a quantization_config"), std::string::npos) << r.err;
  TempDir odd, odd_out;
  InitRandom(odd.path(), "dense", " --set hidden_size=48");
  r = RunMlaserve("quantize --weights int4-g32 --model-path " + ShellQuote(odd.path()) + " --out " + ShellQuote(odd_out.path()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a multiple of the int4 group size 32"), std::string::npos) << r.err;
}

// DeepSeek-V3/R1 keep their MTP layer at index num_hidden_layers: skipped (without NEXTN) with
// one debug log line.
TEST(QuantizedCheckpoint, MtpLayersAreSkippedWithOneLogLine) {
  TempDir dir;
  InitRandom(dir.path(), "fp8-block");  // tiny: 3 layers
  const std::string mtp = "model.layers.3.";
  RewriteTensors(dir.path(), [](TensorEdit&) {},
                 {{mtp + "enorm.weight", DType::kBF16, {64}},
                  {mtp + "hnorm.weight", DType::kBF16, {64}},
                  {mtp + "eh_proj.weight", DType::kBF16, {64, 128}},
                  {mtp + "self_attn.o_proj.weight", DType::kF8E4M3, {64, 64}},
                  {mtp + "self_attn.o_proj.weight_scale_inv", DType::kF32, {1, 1}},
                  {mtp + "shared_head.head.weight", DType::kBF16, {256, 64}}});
  EXPECT_EQ(LoadError(dir.path()), "");
  auto r = RunMlaserve("score --model-path " + ShellQuote(dir.path()) + " --input-ids 1,2,3 --log-level debug");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("skipping MTP (nextn) layer 3: 6 tensors"), std::string::npos) << r.err;
}

// weights-eval quantizes the bundled model on the fly and reports both layouts against bf16.
TEST(QuantizedCheckpoint, WeightsEvalReportsBothLayouts) {
  TempDir dir;
  const std::string json_path = dir.path() + "/eval.json";
  auto r = RunMlaserve("weights-eval --model-path " + ShellQuote(std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla") +
                       " --max-tokens 256 --window 128 --json " + ShellQuote(json_path));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto text = ReadWholeFile(json_path);
  ASSERT_TRUE(text.ok());
  const json j = json::parse(*text);
  for (const char* scheme : {"fp8-block", "int4-g32"}) {
    ASSERT_TRUE(j["weights"].contains(scheme)) << *text;
    EXPECT_GT(j["weights"][scheme]["top1"].get<double>(), 0.9) << scheme;
    EXPECT_LT(j["weights"][scheme]["mean_kl"].get<double>(), 0.01) << scheme;
    // The bf16 checkpoint is 15.3 MB, its MTP layer included (quantized too; int4 keeps the
    // embedding copy and lm_head in bf16).
    EXPECT_LT(j["weights"][scheme]["mb"].get<double>(), 11.5) << scheme;
    // The bf16 table multiplies the quantized codes in bf16 too: its row exists and differs from
    // the fp32 table's (activations rounded to bf16), by far less than the quantization itself.
    if (CpuSupportsBf16Dot()) {
      const std::string row = std::string(scheme) + " + avx512-bf16";
      ASSERT_TRUE(j["weights"].contains(row)) << *text;
      EXPECT_GT(j["weights"][row]["top1"].get<double>(), 0.9) << row;
      EXPECT_NE(j["weights"][row]["mean_kl"].get<double>(), j["weights"][scheme]["mean_kl"].get<double>()) << row;
      EXPECT_LT(j["weights"][row]["mean_kl"].get<double>(), 2.0 * j["weights"][scheme]["mean_kl"].get<double>())
          << row;
    }
  }
}

}  // namespace
}  // namespace mlaserve
