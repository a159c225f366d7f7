// mlaserve quantize: converts a bf16/f16/f32 checkpoint into the fp8 block-scaled layout
// (DeepSeek-V3, Kimi-K2) or compressed-tensors int4 experts (Kimi-K2-Thinking), see
// model/quantize.h; or writes it as a deepseek2 GGUF file (model/gguf_export.h).
#include <cstdio>

#include "cli/commands.h"
#include "model/gguf_export.h"
#include "model/quantize.h"

namespace mlaserve::cli {

int RunQuantize(Args& args) {
  const std::string in_dir = args.Str("model-path", "", "the dense checkpoint directory to read (required)",
                                      {.value_name = "DIR"});
  const std::string out_dir = args.Str("out", "", "directory (safetensors) or file (gguf) to write (required)",
                                       {.value_name = "DIR|FILE"});
  const std::string out_format = args.Str("out-format", "safetensors", "safetensors: a Hugging Face checkpoint "
                                          "directory; gguf: one llama.cpp deepseek2 file (docs/gguf.md)",
                                          {.choices = {"safetensors", "gguf"}});
  const std::string weights = args.Str("weights", "", "safetensors: fp8-block (every decoder Linear as E4M3 with "
                                       "128x128 block scales) or int4-g32 (routed experts as int4, group 32, "
                                       "compressed-tensors); gguf: bf16, f16, f32, q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1 or "
                                       "q4_0 (the matrices' type; the K types: Q8_0 where a row is not whole "
                                       "256-value blocks)",
                                       {.shown_default = "fp8-block; gguf: bf16",
                                        .choices = {"fp8-block", "int4-g32", "bf16", "f16", "f32", "q8_0", "q6_k", "q5_k", "q5_1", "q5_0", "q4_k",
                                                    "q4_1", "q4_0"}});
  const std::string gguf_kv_layout = args.Str("gguf-kv-layout", "combined", "gguf: kv_b_proj as one attn_kv_b "
                                              "(older files) or split into attn_k_b and attn_v_b (newer files)",
                                              {.choices = {"combined", "split"}});
  const int split_max_tensors = args.Int("gguf-split-max-tensors", 0,
                                        "gguf: a split GGUF (llama.cpp's gguf-split layout: OUT-00001-of-0000N.gguf, "
                                        "the metadata in the first) of at most N tensors a shard; 0: one file",
                                        {.value_name = "N", .min = 0});
  if (in_dir.empty()) args.Reject("--model-path DIR is required");
  if (out_dir.empty()) args.Reject("--out DIR|FILE is required");
  const bool gguf = out_format == "gguf";
  if (gguf && (weights == "fp8-block" || weights == "int4-g32")) {
    args.Reject("--weights " + weights + " is for --out-format safetensors (gguf: bf16, f16, f32, q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0)");
  }
  if (!gguf && (weights == "bf16" || weights == "f16" || weights == "f32" || weights == "q8_0" ||
                weights == "q6_k" || weights == "q5_k" || weights == "q4_k" ||
                weights == "q4_0" || weights == "q4_1" || weights == "q5_0" || weights == "q5_1")) {
    args.Reject("--weights " + weights + " is for --out-format gguf");
  }
  if (!gguf && args.WasGiven("gguf-kv-layout")) args.Reject("--gguf-kv-layout is for --out-format gguf");
  if (!gguf && args.WasGiven("gguf-split-max-tensors")) args.Reject("--gguf-split-max-tensors is for --out-format gguf");
  if (auto exit_code = args.Finish()) return *exit_code;
  if (gguf) {
    const GgufExportOptions options{.matrix_type = weights == "f32"    ? GgmlType::kF32
                                                   : weights == "f16"  ? GgmlType::kF16
                                                   : weights == "q8_0" ? GgmlType::kQ8_0
                                                   : weights == "q6_k" ? GgmlType::kQ6_K
                                                   : weights == "q5_k" ? GgmlType::kQ5_K
                                                   : weights == "q4_k" ? GgmlType::kQ4_K
                                                   : weights == "q4_0" ? GgmlType::kQ4_0
                                                   : weights == "q4_1" ? GgmlType::kQ4_1
                                                   : weights == "q5_0" ? GgmlType::kQ5_0
                                                   : weights == "q5_1" ? GgmlType::kQ5_1
                                                                       : GgmlType::kBF16,
                                    .split_kv_b = gguf_kv_layout == "split",
                                    .split_max_tensors = size_t(split_max_tensors)};
    auto report = WriteGgufCheckpoint(in_dir, out_dir, options);
    if (!report.ok()) return Fail("quantize", report.error());
    std::printf("wrote %s (GGUF, %s matrices, kv_b %s): %zu tensors, %.1f MB\n", out_dir.c_str(),
                weights.empty() ? "bf16" : weights.c_str(), gguf_kv_layout.c_str(), report->num_tensors,
                double(report->output_bytes) / 1e6);
    if (report->paths.size() > 1) {
      std::printf("in %zu shards: %s ... %s\n", report->paths.size(), report->paths.front().c_str(),
                  report->paths.back().c_str());
    }
    return 0;
  }
  const QuantScheme scheme = weights == "int4-g32" ? QuantScheme::kInt4G32 : QuantScheme::kFp8Block;  // "": fp8-block
  auto report = QuantizeCheckpoint(in_dir, out_dir, scheme);
  if (!report.ok()) return Fail("quantize", report.error());
  std::printf("wrote %s (%s): %zu matrices quantized, %zu tensors copied, %.1f MB -> %.1f MB\n", out_dir.c_str(),
              QuantSchemeName(scheme), report->num_quantized, report->num_copied, double(report->input_bytes) / 1e6,
              double(report->output_bytes) / 1e6);
  return 0;
}

}  // namespace mlaserve::cli
