#include "sim/builtin_profiles.h"

namespace mlaserve {
namespace {

// Efficiencies shared by the Hopper profiles (H100, H200), from published figures on H800 /
// H100 / H200 (the same SM90 tensor cores and HBM3 controllers):
//   kv 0.85:        FlashMLA decode, 3000 GB/s of the H800's 3.35 TB/s (0.90), STREAM-like reads
//                   0.84-0.89 on H100/H200;
//   weights 0.70:   DeepGEMM's small-M (decode) FP8 grouped products, 1.5-2.7 TB/s of 3.35;
//   linear 0.65:    DeepGEMM dense FP8 1358 of 1979 TFLOPS (0.69), cuBLASLt FP8 0.69-0.70;
//   attention 0.60: FlashMLA compute-bound 580-660 of 989 TFLOPS;
//   interconnect 0.80: 8-GPU ring all-reduce ~370 of 450 GB/s (NCCL maintainer, nccl-tests #212).
// Step overhead: 2 ms per step, per token 0, per logits row 0: an assumption (CUDA-graph decode
// steps of SGLang spend ~1-3 ms outside the kernels), not a measurement.
constexpr std::string_view kH100 = R"json({
  "name": "h100",
  "description": "NVIDIA H100 SXM 80 GB, one GPU of an 8-GPU NVLink node",
  "memory_gb": 80,
  "memory_bandwidth_gbs": 3350,
  "bf16_tflops": 989,
  "fp8_tflops": 1979,
  "interconnect_gbs": 450,
  "collective_latency_us": 10,
  "combine": "max",
  "efficiency": {"weights": 0.70, "kv": 0.85, "linear": 0.65, "attention": 0.60, "interconnect": 0.80},
  "step_overhead_us": 2000,
  "per_token_us": 0,
  "per_logits_row_us": 0,
  "sources": [
    "rates: NVIDIA H100 SXM datasheet figures (3.35 TB/s HBM3, 989 TFLOPS dense bf16, 1979 dense fp8, NVLink 4 900 GB/s both ways), as quoted by NVIDIA's MLPerf system descriptions and stas00/ml-engineering compute/accelerator/README.md",
    "kv 0.85: deepseek-ai/FlashMLA README, 3000 GB/s memory-bound decode on H800 (3.35 TB/s)",
    "weights 0.70: deepseek-ai/DeepGEMM README, grouped fp8 products at decode sizes 1.5-2.7 TB/s on H800",
    "linear 0.65: deepseek-ai/DeepGEMM README, 1358 TFLOPS fp8 on H800 (0.69 of 1979); cuBLASLt fp8 0.69-0.70 (Azure/AI-benchmarking-guide ND_H100_v5)",
    "attention 0.60: deepseek-ai/FlashMLA README, 580-660 TFLOPS compute-bound on H800 (0.59-0.67 of 989)",
    "interconnect 0.80: NVIDIA/nccl-tests issue 212, ~370 GB/s ring all-reduce bus bandwidth of 450 on 8 GPUs",
    "overheads: assumed (2 ms a step), not measured"
  ]
})json";

constexpr std::string_view kH200 = R"json({
  "name": "h200",
  "description": "NVIDIA H200 SXM 141 GB, one GPU of an 8-GPU NVLink node",
  "memory_gb": 141,
  "memory_bandwidth_gbs": 4800,
  "bf16_tflops": 989,
  "fp8_tflops": 1979,
  "interconnect_gbs": 450,
  "collective_latency_us": 10,
  "combine": "max",
  "efficiency": {"weights": 0.70, "kv": 0.85, "linear": 0.65, "attention": 0.60, "interconnect": 0.80},
  "step_overhead_us": 2000,
  "per_token_us": 0,
  "per_logits_row_us": 0,
  "sources": [
    "rates: NVIDIA H200 SXM datasheet figures (141 GB HBM3e at 4.8 TB/s, 989 TFLOPS dense bf16, 1979 dense fp8, NVLink 4 900 GB/s both ways), as quoted by NVIDIA's MLPerf system descriptions and stas00/ml-engineering",
    "efficiencies: as the h100 profile (same Hopper tensor cores): FlashMLA, DeepGEMM, cuBLASLt, nccl-tests figures; 8xH200 all-reduce 367.6 GB/s without NVLS (stas00/ml-engineering network/benchmarks/results/all-reduce-8xH200.md)",
    "overheads: assumed (2 ms a step), not measured"
  ]
})json";

constexpr std::string_view kB200 = R"json({
  "name": "b200",
  "description": "NVIDIA B200 180 GB (HGX B200), one GPU of an 8-GPU NVLink 5 node",
  "memory_gb": 180,
  "memory_bandwidth_gbs": 8000,
  "bf16_tflops": 2250,
  "fp8_tflops": 4500,
  "interconnect_gbs": 900,
  "collective_latency_us": 10,
  "combine": "max",
  "efficiency": {"weights": 0.70, "kv": 0.85, "linear": 0.70, "attention": 0.50, "interconnect": 0.80},
  "step_overhead_us": 2000,
  "per_token_us": 0,
  "per_logits_row_us": 0,
  "sources": [
    "rates: NVIDIA HGX B200 figures (180 GB HBM3e at 8 TB/s, 2250 TFLOPS dense bf16, 4500 dense fp8, NVLink 5 1800 GB/s both ways), as compiled by stas00/ml-engineering and glennklockwood.com",
    "linear 0.70: fp8 matmul 0.71-0.76 of peak (stas00/ml-engineering MAMF table)",
    "attention 0.50: FlashMLA README, 350 TFLOPS fp8-KV sparse decode on B200 'not really optimized'; dense bf16 MLA assumed lower than Hopper's 0.60 until published",
    "weights, kv, interconnect: the Hopper assumptions (no 8xB200 all-reduce figure found)",
    "overheads: assumed (2 ms a step), not measured"
  ]
})json";

constexpr std::string_view kMi300x = R"json({
  "name": "mi300x",
  "description": "AMD Instinct MI300X 192 GB, one GPU of an 8-GPU Infinity Fabric node",
  "memory_gb": 192,
  "memory_bandwidth_gbs": 5300,
  "bf16_tflops": 1307.4,
  "fp8_tflops": 2614.9,
  "interconnect_gbs": 448,
  "collective_latency_us": 15,
  "combine": "max",
  "efficiency": {"weights": 0.60, "kv": 0.75, "linear": 0.45, "attention": 0.40, "interconnect": 0.70},
  "step_overhead_us": 2500,
  "per_token_us": 0,
  "per_logits_row_us": 0,
  "sources": [
    "rates: ROCm docs conceptual/gpu-arch/mi300.md (5.3 TB/s, 1307.4 TFLOPS dense bf16, 2614.9 fp8); Infinity Fabric 448 GB/s one way in all (64 GB/s per peer), stas00/ml-engineering",
    "kv 0.75: STREAM-like reads 0.73-0.80 of peak on MI300X (stas00/ml-engineering)",
    "linear 0.45: hipBLASLt fp8 ~0.44 of peak (stas00/ml-engineering MAMF table)",
    "interconnect 0.70: 8xMI300X RCCL all-reduce ~314 GB/s bus bandwidth of 448 (Azure ND MI300X v5 results)",
    "weights 0.60, attention 0.40: assumed below the Hopper figures in the same proportion as linear",
    "overheads: assumed (2.5 ms a step), not measured"
  ]
})json";

}  // namespace

const std::vector<BuiltinProfile>& BuiltinProfiles() {
  static const std::vector<BuiltinProfile> profiles = {
      {"h100", kH100}, {"h200", kH200}, {"b200", kB200}, {"mi300x", kMi300x}};
  return profiles;
}

}  // namespace mlaserve
