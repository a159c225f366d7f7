// Writing quantized checkpoints in the layouts the published models ship, from a dense
// (F32/BF16/F16) one: the tensors, dtypes and config.json quantization_config blocks that
// DeepSeek (fp8 block-scaled) and Moonshot (compressed-tensors int4) publish.
//   fp8-block: every Linear of the decoder layers (attention projections, dense MLP, routed and
//     shared experts) becomes `X.weight` F8_E4M3 + `X.weight_scale_inv` F32 [ceil(out/128),
//     ceil(in/128)], scale = block amax / 448. Embeddings, lm_head, norms, the router gate and
//     its e_score_correction_bias stay as they are.
//   int4-g32: the routed experts only (Kimi-K2-Thinking) become `X.weight_packed` I32 [out, in/8]
//     (value j of a word at bits 4j, stored as q + 8), `X.weight_scale` BF16 [out, in/32]
//     (group amax / 7.5, compressed-tensors' symmetric min-max), `X.weight_shape` I64 [2].
#pragma once

#include <string>

#include "core/status.h"

namespace mlaserve {

enum class QuantScheme { kFp8Block, kInt4G32 };

struct QuantizeReport {
  size_t num_quantized = 0;   // matrices written in the quantized layout
  size_t num_copied = 0;      // tensors copied unchanged
  size_t input_bytes = 0;     // tensor bytes read
  size_t output_bytes = 0;    // tensor bytes written
};

// Reads the checkpoint in `in_dir` (config.json + safetensors), writes `out_dir`/config.json
// (with quantization_config), `out_dir`/model.safetensors, and copies the other small files
// (tokenizer, README). Fails on an already quantized input, or a matrix the scheme cannot
// represent (int4: in_features not a multiple of 32).
Result<QuantizeReport> QuantizeCheckpoint(const std::string& in_dir, const std::string& out_dir, QuantScheme scheme);

// "fp8-block" / "int4-g32".
const char* QuantSchemeName(QuantScheme scheme);

}  // namespace mlaserve
