// What a device can do, for the cost model of `mlaserve simulate` (sim/step_cost.h): its
// memory, the rates of its memory, arithmetic and interconnect, and how much of each rate a
// real engine reaches (efficiencies), plus fixed costs per step and per logits row. A profile
// is a JSON file (docs/simulate.md, "Hardware profiles"): GPU profiles carry datasheet rates
// and efficiencies stated as assumptions with their sources; `--hardware this-host` writes one
// whose rates are this machine's probes and whose efficiencies are fitted to measured steps
// (sim/calibrate.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace mlaserve {

// How a phase's memory time and arithmetic time combine: a GPU overlaps them (max), a CPU
// engine that runs its phases one after another is closer to their sum.
enum class CostCombine { kMax, kSum };

struct HardwareProfile {
  std::string name;
  std::string description;
  double memory_gb = 0;             // per device
  double memory_bandwidth_gbs = 0;  // per device, read
  double bf16_tflops = 0;           // per device, dense: the products' rate on bf16 weights
  double fp8_tflops = 0;            // per device, dense; 0: as bf16 (no faster fp8 path)
  double interconnect_gbs = 0;      // per device, one direction; 0: one device only
  double collective_latency_us = 0; // per collective round
  CostCombine combine = CostCombine::kMax;
  struct Efficiency {
    double weights = 1;       // of memory_bandwidth_gbs, streaming weights
    double kv = 1;            // of memory_bandwidth_gbs, reading the KV cache
    double linear = 1;        // of the tflops, in the weight products
    double attention = 1;     // of bf16_tflops, in attention
    double interconnect = 1;  // of interconnect_gbs, in collectives
  } efficiency;
  double step_overhead_us = 0;        // per forward step (launches, scheduling, host work)
  double per_token_us = 0;            // per token a step runs (norms, rope, routing: the small ops)
  double per_logits_row_us = 0;       // per logits row (lm_head's softmax, sampling, detokenizing)
  // Latency from a client's send to the engine's intake (connection, HTTP parsing, validation):
  // added to every request's time to first token, not to any step.
  double request_latency_us = 0;
  std::vector<std::string> sources;   // where the numbers come from, one line each
};

// Reads a profile; one error naming the file and the field for a missing or bad value or a key
// the format does not have.
Result<HardwareProfile> LoadHardwareProfile(const std::string& path);
Result<HardwareProfile> ParseHardwareProfile(const nlohmann::json& j, const std::string& where);
nlohmann::json HardwareProfileJson(const HardwareProfile& p);

}  // namespace mlaserve
