// mlaserve plan: KV capacity arithmetic for any config.json, before buying or renting memory.
// Per format: bytes per token per layer and in total, the tokens that fit the KV budget of one
// rank, and the requests of a given average length that can decode at once. MLA caches are
// replicated on every tensor-parallel rank (one latent per token, not per head), so TP shrinks
// the weights per rank but not the KV per token.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/json_file.h"
#include "kvcache/kv_budget.h"
#include "kvcache/kv_format.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/weight_bytes.h"

namespace mlaserve::cli {
namespace {

// Weight bytes: the checkpoint's tensors when the directory has them, else what the config's
// tensors take in the format its quantization_config stores them in (model/weight_bytes.h).
double WeightsGb(const std::string& path, const ModelConfig& config, std::string* source) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    auto ckpt = Checkpoint::Open(path);
    if (ckpt.ok()) {
      *source = "read from the checkpoint";
      return double((*ckpt)->total_tensor_bytes()) / 1e9;
    }
  }
  const WeightBytes w = EstimateWeightBytes(config);
  switch (config.quant.method) {
    case WeightQuantMethod::kNone: *source = "estimated from the config, bf16"; break;
    case WeightQuantMethod::kFp8Block:
      *source = "estimated from the config: fp8 block-scaled linears (" + std::to_string(w.quantized_tensors) +
                " matrices), the rest bf16";
      break;
    case WeightQuantMethod::kInt4Pack:
      *source = "estimated from the config: int4 group-" + std::to_string(config.quant.group_size) + " (" +
                std::to_string(w.quantized_tensors) + " matrices), the rest bf16";
      break;
  }
  return w.total_bytes / 1e9;
}

}  // namespace

int RunPlan(Args& args) {
  const std::string model_path = args.Str("model-path", "", "a model directory or its config.json (required)",
                                          {.value_name = "DIR|FILE"});
  const double device_gb =
      args.Double("device-memory", 0.0, "memory per rank, in GB",
                  {.value_name = "GB", .shown_default = "this machine's physical memory", .min = 0});
  const double fraction = args.Double("mem-fraction-static", 0.88, "fraction of --device-memory for weights + KV",
                                      {.above = 0, .max = 1});
  const int tp = args.Int("tp-size", 1, "tensor-parallel ranks the weights are split over", {.min = 1});
  const double weights_arg = args.Double("weights-gb", -1.0, "weight bytes of the whole model, in GB",
                                         {.value_name = "GB",
                                          .shown_default = "the checkpoint's, else the config's tensors in their stored format",
                                          .min = 0});
  const double budget_arg = args.Double("kv-budget-gb", -1.0, "KV budget per rank, in GB",
                                        {.value_name = "GB", .shown_default = "from the memory flags", .above = 0});
  const int avg_seq_len = args.Int("avg-seq-len", 4096, "average tokens per request, for the requests column",
                                   {.min = 1});
  const std::string json_path = args.Str("json", "", "also write the table as JSON", {.value_name = "FILE"});
  if (model_path.empty()) args.Reject("--model-path (a model directory or config.json) is required");
  if (auto exit_code = args.Finish()) return *exit_code;
  auto config = LoadModelConfig(model_path);
  if (!config.ok()) return Fail("plan", config.error());
  const ModelConfig& c = *config;

  std::string weights_source = "given";
  const double weights_gb = weights_arg >= 0 ? weights_arg : WeightsGb(model_path, c, &weights_source);
  const double device = device_gb > 0 ? device_gb : PhysicalMemoryBytes() / 1e9;
  double budget_gb;
  std::string budget_line;
  char buf[512];
  if (budget_arg > 0) {
    budget_gb = budget_arg;
    std::snprintf(buf, sizeof buf, "KV budget per rank: %.2f GB (given)", budget_gb);
  } else {
    // SGLang: rest = (total - weights) - total * (1 - mem_fraction_static).
    budget_gb = device * fraction - weights_gb / tp;
    std::snprintf(buf, sizeof buf,
                  "KV budget per rank: device %.1f GB x mem_fraction_static %.2f - weights %.1f GB "
                  "(%.1f GB %s, / tp %d) = %.2f GB",
                  device, fraction, weights_gb / tp, weights_gb, weights_source.c_str(), tp, budget_gb);
  }
  budget_line = buf;
  if (budget_gb <= 0) {
    return Fail("plan", budget_line + ": no memory left for the KV cache (raise --tp-size or "
                                      "--mem-fraction-static, or use a larger device)");
  }

  std::printf("model: %s, %d layers, kv_lora_rank %d + qk_rope_head_dim %d = %d cached values "
              "per token per layer (MLA: replicated on every TP rank)\n",
              c.model_type.c_str(), c.num_hidden_layers, c.kv_lora_rank, c.qk_rope_head_dim,
              c.kv_cache_dim());
  std::printf("%s\n\n", budget_line.c_str());
  const std::string requests_header = "requests@" + std::to_string(avg_seq_len);
  std::printf("%-12s %13s %14s %16s %16s %10s\n", "format", "B/token/layer", "B/token", "tokens",
              requests_header.c_str(), "vs bf16");
  nlohmann::json out;
  out["model_type"] = c.model_type;
  out["num_layers"] = c.num_hidden_layers;
  out["kv_budget_gb_per_rank"] = budget_gb;
  out["weights_gb"] = weights_gb;
  out["weights_source"] = weights_source;
  out["avg_seq_len"] = avg_seq_len;
  const int64_t bf16_tokens = int64_t(
      budget_gb * 1e9 /
      double(KvRowBytes(KvFormat::kBF16, c.kv_lora_rank, c.qk_rope_head_dim) * size_t(c.num_hidden_layers)));
  for (KvFormat f : kAllKvFormats) {
    if (!ValidateKvFormatDims(f, c.kv_lora_rank, c.qk_rope_head_dim).ok()) continue;
    const size_t per_layer = KvRowBytes(f, c.kv_lora_rank, c.qk_rope_head_dim);
    const size_t per_token = per_layer * size_t(c.num_hidden_layers);
    const int64_t tokens = int64_t(budget_gb * 1e9 / double(per_token));
    const double requests = double(tokens) / avg_seq_len;
    std::printf("%-12s %12zu %14zu %16lld %16.1f %9.2fx\n", KvFormatName(f), per_layer, per_token,
                (long long)tokens, requests, double(tokens) / double(std::max<int64_t>(1, bf16_tokens)));
    out["formats"].push_back({{"format", KvFormatName(f)},
                              {"bytes_per_token_per_layer", per_layer},
                              {"bytes_per_token", per_token},
                              {"max_total_num_tokens", tokens},
                              {"requests_at_avg_seq_len", requests}});
  }
  std::printf(
      "\nA host-memory cache tier (SGLang --enable-hierarchical-cache) holds reusable prefixes in "
      "host RAM and copies them back to the device before prefill: it saves recomputing shared "
      "prefixes, but it does not raise the number of requests decoding at once, which the "
      "device KV budget above bounds.\n");
  if (!json_path.empty()) {
    if (Status s = WriteJsonFile(json_path, out); !s.ok()) return Fail("plan", s.message());
  }
  return 0;
}

}  // namespace mlaserve::cli
