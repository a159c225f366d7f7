// mlaserve plan: KV capacity arithmetic for any config.json, before buying or renting memory.
// Per format: bytes per token per layer and in total, the tokens that fit the KV budget of one
// rank, and the requests of a given average length that can decode at once. MLA caches are
// replicated on every tensor-parallel rank (one latent per token, not per head), so TP shrinks
// the weights per rank but not the KV per token. With --tp-size N: the weights each rank holds
// (model/tp_weights.h; every rank keeps the whole cache, so the rank holding the most bounds the
// job's KV tokens) and the bytes each rank receives per token (model/tp_comm.h), against the
// time a memory-bound decode token takes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/json_file.h"
#include "cli/weight_source.h"
#include "kvcache/kv_budget.h"
#include "kvcache/kv_format.h"
#include "model/config.h"
#include "model/eagle3_draft.h"
#include "model/safetensors.h"
#include "model/tp_comm.h"
#include "model/tp_weights.h"
#include "model/weight_bytes.h"
#include "model/weights.h"

namespace mlaserve::cli {
namespace {

// A speculative-decoding setting's share of the memory (the engine's ReadEngineFlags /
// LoadModel): NEXTN loads the first MTP layer (its stored tensors, the V3-style embed and head
// copies included, as Model::weight_bytes counts them) and caches one more latent layer per
// token; EAGLE3 holds the draft's files and its cache's k and v per token.
struct DraftMemory {
  double weight_bytes = 0;
  int extra_latent_layers = 0;
  size_t extra_bytes_per_token = 0;
  std::string line;  // what plan prints about it
};

Result<DraftMemory> SpeculativeMemory(const std::string& algorithm, const std::string& draft_path,
                                      const ModelConfig& c, const WeightSource& source) {
  DraftMemory out;
  if (algorithm == "NEXTN") {
    if (c.num_nextn_predict_layers == 0) {
      return Status::Error("--speculative-algorithm NEXTN: the model has no MTP layer (config.json: "
                           "num_nextn_predict_layers is 0)");
    }
    // The first MTP layer's tensors: stored, or (from a config alone) the ones the model binds in
    // their stored format.
    const std::string prefix = c.tensor_prefix + "model.layers." + std::to_string(c.num_hidden_layers) + ".";
    if (source.from_checkpoint) {
      for (const StoredTensor& t : source.tensors) {
        if (t.name.starts_with(prefix)) out.weight_bytes += t.bytes;
      }
    } else {
      const QuantizationIgnoreList ignore(c.quant.ignore);
      for (const TensorSpec& t : ListWeightTensors(c, /*with_mtp=*/true)) {
        if (!t.name.starts_with(prefix)) continue;
        for (const StoredTensor& stored : StoredForm(t, c.quant, ignore)) out.weight_bytes += stored.bytes;
      }
    }
    out.extra_latent_layers = 1;
    char buf[256];
    std::snprintf(buf, sizeof buf, "speculative NEXTN: + the MTP layer's %.3f GB of weights, + 1 latent layer per token",
                  out.weight_bytes / 1e9);
    out.line = buf;
  } else if (algorithm == "EAGLE3") {
    auto draft = ReadEagle3Config(draft_path);
    if (!draft.ok()) return draft.status();
    out.weight_bytes = double(draft->checkpoint_bytes);
    out.extra_bytes_per_token = draft->kv_bytes_per_token();
    char buf[256];
    std::snprintf(buf, sizeof buf, "speculative EAGLE3: + the draft's %.3f GB of files, + %zu B per token (its fp32 "
                  "k and v)", out.weight_bytes / 1e9, out.extra_bytes_per_token);
    out.line = buf;
  }
  return out;
}

// Per rank: the weights it holds, as split by model/tensor_parallel.h (in MB for small models).
void PrintRankWeights(const TpWeightPlan& plan, std::span<const double> budget_gb, int64_t bf16_row_bytes) {
  const bool small = plan.loaded_bytes < 10e9;
  const double unit = small ? 1e6 : 1e9;
  const char* unit_name = small ? "MB" : "GB";
  std::printf("\ntensor parallel over %d ranks (model/tensor_parallel.h): every rank holds %.2f %s replicated "
              "(embedding, norms, q_a_proj, kv_a_proj_with_mqa, routers) and the whole latent KV cache; "
              "heads, rows and routed experts are split\n",
              plan.tp_size, plan.replicated_bytes / unit, unit_name);
  const std::string weights = std::string("weights ") + unit_name, experts = std::string("routed experts ") + unit_name;
  std::printf("%-6s %12s %12s %12s %24s %14s %14s\n", "rank", weights.c_str(), "replicated", "sharded",
              experts.c_str(), "KV budget GB", "bf16 tokens");
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const TpRankWeights& w = plan.ranks[r];
    std::printf("%-6zu %12.2f %12.2f %12.2f %10.2f (%4lld a layer) %14.2f %14lld\n", r, w.bytes / unit,
                plan.replicated_bytes / unit, w.sharded_bytes / unit, w.expert_bytes / unit,
                (long long)w.experts_per_layer, budget_gb[r], (long long)(budget_gb[r] * 1e9 / double(bf16_row_bytes)));
  }
  std::printf("largest rank: %lld (%.2f %s); the KV tokens the job can use are that rank's, the fewest "
              "(every rank keeps the whole cache)\n",
              (long long)plan.largest_rank, plan.ranks[size_t(plan.largest_rank)].bytes / unit, unit_name);
}

// What a node and its link can do, for the communication model.
struct NodeModel {
  double read_gbs = 0;     // memory read bandwidth of one node
  double network_gbs = 0;  // link bandwidth
  double latency_us = 0;   // per collective round
};

// The communication model of model/tp_comm.h against a memory-bound decode token.
nlohmann::json PrintCommunication(const ModelConfig& c, const TpWeightPlan& plan, const NodeModel& node) {
  nlohmann::json out;
  std::printf("\ncommunication per token, bytes each rank receives (ring collectives, fp32 values; rank 0 also "
              "receives the logits) (a model, not a measurement):\n");
  std::printf("%-26s %12s %12s %12s %12s %13s %13s %9s\n", "scheme", "attn/layer", "dense/layer", "MoE/layer",
              "lm_head", "decode token", "prefill token", "msgs/step");
  // The slowest rank sets the pace of a decode step: the one reading the most per token.
  double read_bytes = 0;
  for (int r = 0; r < plan.tp_size; ++r) read_bytes = std::max(read_bytes, DecodeReadBytesPerToken(plan, c, r));
  const double compute_s = read_bytes / (node.read_gbs * 1e9);
  std::string times, break_even;
  for (TpScheme scheme : {TpScheme::kExactAllGather, TpScheme::kAllReduce}) {
    const bool exact = scheme == TpScheme::kExactAllGather;
    const TpCommPerToken comm = ModelTpComm(c, plan.tp_size, scheme);
    std::printf("%-26s %9.1f KB %9.1f KB %9.1f KB %9.1f KB %10.3f MB %10.3f MB %9d\n",
                exact ? "all-gather (exact)" : "all-reduce (not exact)", comm.attention_bytes / 1e3,
                comm.dense_mlp_bytes / 1e3, comm.moe_bytes / 1e3, comm.lm_head_bytes / 1e3, comm.decode_bytes() / 1e6,
                comm.prefill_bytes() / 1e6, comm.messages_per_step());
    const double transfer_s = comm.decode_bytes() / (node.network_gbs * 1e9);
    const int rounds = comm.messages_per_step() * LatencyRoundsPerCollective(plan.tp_size);
    const double latency_s = rounds * node.latency_us * 1e-6;
    const double equal_gbs = comm.decode_bytes() / compute_s / 1e9;
    // With the latency, the transfer must fit in what the latency leaves of the compute time.
    const bool reachable = latency_s < compute_s;
    const double equal_with_latency_gbs = reachable ? comm.decode_bytes() / (compute_s - latency_s) / 1e9 : 0;
    const char* name = exact ? "all-gather" : "all-reduce";
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s%s %.3f ms transfer + %.3f ms latency (%d rounds)", times.empty() ? "" : ", ",
                  name, transfer_s * 1e3, latency_s * 1e3, rounds);
    times += buf;
    if (reachable) {
      std::snprintf(buf, sizeof buf, "%s%s %.2f GB/s (%.2f GB/s with the latency)", break_even.empty() ? "" : ", ",
                    name, equal_gbs, equal_with_latency_gbs);
    } else {
      std::snprintf(buf, sizeof buf, "%s%s %.2f GB/s (never with the latency: it alone exceeds the compute)",
                    break_even.empty() ? "" : ", ", name, equal_gbs);
    }
    break_even += buf;
    out[exact ? "exact_all_gather" : "all_reduce"] = {
        {"attention_bytes_per_layer", comm.attention_bytes},
        {"dense_mlp_bytes_per_layer", comm.dense_mlp_bytes},
        {"moe_bytes_per_layer", comm.moe_bytes},
        {"lm_head_bytes", comm.lm_head_bytes},
        {"decode_bytes_per_token", comm.decode_bytes()},
        {"prefill_bytes_per_token", comm.prefill_bytes()},
        {"attention_messages_per_layer", comm.attention_messages},
        {"dense_mlp_messages_per_layer", comm.dense_mlp_messages},
        {"moe_messages_per_layer", comm.moe_messages},
        {"messages_per_step", comm.messages_per_step()},
        {"latency_rounds_per_step", rounds},
        {"decode_transfer_ms_per_token", transfer_s * 1e3},
        {"decode_latency_ms_per_step", latency_s * 1e3},
        {"break_even_network_gbs", equal_gbs},
        {"break_even_network_gbs_with_latency", reachable ? nlohmann::json(equal_with_latency_gbs) : nlohmann::json()}};
  }
  std::printf("messages are per forward step: a decode step of B tokens sends them once, a prefill chunk once "
              "for all its tokens; a prefill token that is not its sequence's last has no logits row\n");
  std::printf("decode at batch 1, memory-bound: the busiest rank reads %.3f GB of weights per token -> %.3f ms per "
              "token at %.1f GB/s per node (a model, not a measurement)\n",
              read_bytes / 1e9, compute_s * 1e3, node.read_gbs);
  std::printf("communication per decode token at %.1f GB/s and %.1f us per round: %s (a model, not a measurement)\n",
              node.network_gbs, node.latency_us, times.c_str());
  std::printf("network bandwidth at which communication equals that compute: %s (a model, not a measurement)\n",
              break_even.c_str());
  out["decode_read_bytes_per_token"] = read_bytes;
  out["node_bandwidth_gbs"] = node.read_gbs;
  out["network_gbs"] = node.network_gbs;
  out["network_latency_us"] = node.latency_us;
  out["decode_compute_ms_per_token"] = compute_s * 1e3;
  return out;
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
  const double weights_arg = args.Double("weights-gb", -1.0, "weight bytes of the whole model, in GB (split evenly)",
                                         {.value_name = "GB",
                                          .shown_default = "the checkpoint's, else the config's tensors in their stored format",
                                          .min = 0});
  const double budget_arg = args.Double("kv-budget-gb", -1.0, "KV budget per rank, in GB",
                                        {.value_name = "GB", .shown_default = "from the memory flags", .above = 0});
  const int avg_seq_len = args.Int("avg-seq-len", 4096, "average tokens per request, for the requests column",
                                   {.min = 1});
  // Defaults: a CPU node of one socket with 12 DDR5-4800 channels (12 x 4.8 GT/s x 8 B = 460.8 GB/s,
  // a peak; `mlaserve bench` measures a machine's), and a 100 Gb/s RDMA link (RoCE or InfiniBand
  // EDR: 12.5 GB/s, about 2 us a round; TCP takes longer: pass what the network measures).
  const double node_gbs = args.Double("node-bandwidth-gbs", 460.8,
                                      "memory read bandwidth of one node (one rank), in GB/s, for the decode time "
                                      "of the communication model (--tp-size above 1)",
                                      {.value_name = "GB/S", .shown_default = "460.8, one 12-channel DDR5-4800 socket",
                                       .above = 0});
  const double network_gbs = args.Double("network-gbs", 12.5, "network bandwidth of one node's link, in GB/s",
                                         {.value_name = "GB/S", .shown_default = "12.5, 100 Gb/s", .above = 0});
  const double latency_us = args.Double("network-latency-us", 2.0,
                                        "network latency of one collective round, in microseconds",
                                        {.value_name = "US", .shown_default = "2, RDMA", .min = 0});
  const std::string json_path = args.Str("json", "", "also write the table as JSON", {.value_name = "FILE"});
  const std::string speculative = args.Str(
      "speculative-algorithm", "", "count a speculative-decoding setting's memory as the engine does: NEXTN (the MTP "
      "layer and its cache) or EAGLE3 (the draft's files and cache; --speculative-draft-model-path)",
      {.value_name = "NAME", .shown_default = "none", .choices = {"", "NEXTN", "EAGLE3"}});
  const std::string draft_path = args.Str("speculative-draft-model-path", "", "EAGLE3: the draft checkpoint",
                                          {.value_name = "DIR", .shown_default = "none"});
  if (!draft_path.empty() && speculative != "EAGLE3") {
    args.Reject("--speculative-draft-model-path is only used with --speculative-algorithm EAGLE3");
  }
  if (speculative == "EAGLE3" && draft_path.empty()) {
    args.Reject("--speculative-algorithm EAGLE3 needs --speculative-draft-model-path DIR");
  }
  if (!speculative.empty() && tp > 1) {
    args.Reject("--speculative-algorithm " + speculative + " is not supported with tensor parallelism (--tp-size > 1)");
  }
  if (model_path.empty()) args.Reject("--model-path (a model directory or config.json) is required");
  for (const char* flag : {"node-bandwidth-gbs", "network-gbs", "network-latency-us"}) {
    if (tp == 1 && args.WasGiven(flag)) {
      args.Reject(std::string("--") + flag + " is for the communication model of --tp-size above 1");
    }
  }
  if (auto exit_code = args.Finish()) return *exit_code;
  auto config = LoadModelConfig(model_path);
  if (!config.ok()) return Fail("plan", config.error());
  const ModelConfig& c = *config;

  const WeightSource source = ReadWeightSource(model_path, c);
  const TpWeightPlan split = PlanTpWeights(c, source.tensors, tp);
  auto draft = SpeculativeMemory(speculative, draft_path, c, source);
  if (!draft.ok()) return Fail("plan", draft.error());
  const std::string weights_source = weights_arg >= 0 ? "given" : source.description;
  const double weights_gb = weights_arg >= 0 ? weights_arg : source.total_bytes / 1e9;
  // [tp]: what each rank holds; --weights-gb splits evenly. (A draft: one rank.)
  std::vector<double> rank_weights_gb(size_t(tp), weights_arg / tp + draft->weight_bytes / 1e9);
  if (weights_arg < 0) {
    for (int r = 0; r < tp; ++r) rank_weights_gb[size_t(r)] = (split.ranks[size_t(r)].bytes + draft->weight_bytes) / 1e9;
  }
  const double largest_gb = *std::max_element(rank_weights_gb.begin(), rank_weights_gb.end());
  const double device = device_gb > 0 ? device_gb : PhysicalMemoryBytes() / 1e9;
  std::vector<double> rank_budget_gb(size_t(tp), budget_arg);  // [tp]
  char buf[512];
  if (budget_arg > 0) {
    std::snprintf(buf, sizeof buf, "KV budget per rank: %.2f GB (given)", budget_arg);
  } else {
    // SGLang: rest = (total - weights) - total * (1 - mem_fraction_static), on each rank.
    for (int r = 0; r < tp; ++r) rank_budget_gb[size_t(r)] = device * fraction - rank_weights_gb[size_t(r)];
    const char* whose = tp > 1 && weights_arg < 0 ? "the largest rank's; " : "";
    std::snprintf(buf, sizeof buf,
                  "KV budget per rank: device %.1f GB x mem_fraction_static %.2f - weights %.1f GB "
                  "(%s%.1f GB %s, over tp %d) = %.2f GB",
                  device, fraction, largest_gb, whose, weights_gb, weights_source.c_str(), tp,
                  device * fraction - largest_gb);
  }
  const std::string budget_line = buf;
  const double budget_gb = *std::min_element(rank_budget_gb.begin(), rank_budget_gb.end());
  if (budget_gb <= 0) {
    return Fail("plan", budget_line + ": no memory left for the KV cache (raise --tp-size or "
                                      "--mem-fraction-static, or use a larger device)");
  }

  std::printf("model: %s, %d layers, kv_lora_rank %d + qk_rope_head_dim %d = %d cached values "
              "per token per layer (MLA: replicated on every TP rank)\n",
              c.model_type.c_str(), c.num_hidden_layers, c.kv_lora_rank, c.qk_rope_head_dim,
              c.kv_cache_dim());
  std::printf("%s\n", budget_line.c_str());
  if (!draft->line.empty()) std::printf("%s\n", draft->line.c_str());
  if (split.not_loaded_bytes > 0) {
    std::printf("not loaded: %.2f GB of the checkpoint's tensors (MTP layers, a vision tower) are left out of the "
                "weights per rank\n", split.not_loaded_bytes / 1e9);
  }
  const size_t bf16_row_bytes =
      KvRowBytes(KvFormat::kBF16, c.kv_lora_rank, c.qk_rope_head_dim) * size_t(c.num_hidden_layers + draft->extra_latent_layers) +
      draft->extra_bytes_per_token;
  if (tp > 1 && weights_arg < 0) PrintRankWeights(split, rank_budget_gb, int64_t(bf16_row_bytes));
  std::printf("\n");
  const std::string requests_header = "requests@" + std::to_string(avg_seq_len);
  std::printf("%-12s %13s %14s %16s %16s %10s\n", "format", "B/token/layer", "B/token", "tokens",
              requests_header.c_str(), "vs bf16");
  nlohmann::json out;
  out["model_type"] = c.model_type;
  out["num_layers"] = c.num_hidden_layers;
  out["tp_size"] = tp;
  out["kv_budget_gb_per_rank"] = budget_gb;
  out["kv_budget_gb_by_rank"] = rank_budget_gb;
  out["weights_gb"] = weights_gb;
  out["weights_source"] = weights_source;
  out["weights_gb_by_rank"] = rank_weights_gb;
  nlohmann::json rank_bytes = nlohmann::json::array();
  for (const TpRankWeights& w : split.ranks) rank_bytes.push_back(int64_t(std::llround(w.bytes)));
  out["weight_bytes_by_rank"] = rank_bytes;  // as split from the tensors, even with --weights-gb
  out["replicated_weight_bytes"] = int64_t(std::llround(split.replicated_bytes));
  out["loaded_weight_bytes"] = int64_t(std::llround(split.loaded_bytes));
  out["not_loaded_weight_bytes"] = int64_t(std::llround(split.not_loaded_bytes));
  out["avg_seq_len"] = avg_seq_len;
  out["speculative_algorithm"] = speculative.empty() ? nlohmann::json() : nlohmann::json(speculative);
  out["draft_weight_bytes"] = int64_t(std::llround(draft->weight_bytes));
  const int64_t bf16_tokens = int64_t(budget_gb * 1e9 / double(bf16_row_bytes));
  for (KvFormat f : kAllKvFormats) {
    if (!ValidateKvFormatDims(f, c.kv_lora_rank, c.qk_rope_head_dim).ok()) continue;
    const size_t per_layer = KvRowBytes(f, c.kv_lora_rank, c.qk_rope_head_dim);
    const size_t per_token = per_layer * size_t(c.num_hidden_layers + draft->extra_latent_layers) +
                             draft->extra_bytes_per_token;
    const int64_t tokens = int64_t(budget_gb * 1e9 / double(per_token));
    const double requests = double(tokens) / avg_seq_len;
    std::printf("%-12s %12zu %14zu %16lld %16.1f %9.2fx\n", KvFormatName(f), per_layer, per_token,
                (long long)tokens, requests, double(tokens) / double(std::max<int64_t>(1, bf16_tokens)));
    std::vector<int64_t> rank_tokens;  // [tp]
    for (double b : rank_budget_gb) rank_tokens.push_back(int64_t(b * 1e9 / double(per_token)));
    out["formats"].push_back({{"format", KvFormatName(f)},
                              {"bytes_per_token_per_layer", per_layer},
                              {"bytes_per_token", per_token},
                              {"max_total_num_tokens", tokens},
                              {"max_total_num_tokens_by_rank", rank_tokens},
                              {"requests_at_avg_seq_len", requests}});
  }
  if (tp > 1) out["communication"] = PrintCommunication(
        c, split, {.read_gbs = node_gbs, .network_gbs = network_gbs, .latency_us = latency_us});
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
