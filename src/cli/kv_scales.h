// Per-tensor KV scales for the plain fp8 formats (and nvfp4's global scale): the calibration
// file that `mlaserve kv-calibrate` writes (per-layer absolute maxima of the cached rows) and
// the per-layer scales a format derives from it.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "kvcache/kv_format.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace mlaserve::cli {

// Reads FILE (JSON: model_type, num_hidden_layers, kv_lora_rank, qk_rope_head_dim, kv_amax[])
// and returns one scale per layer for `format`. A file made for another shape is an error.
Result<std::vector<float>> LoadKvScales(const std::string& path, const ModelConfig& config,
                                        KvFormat format);

// Per-layer KV scales stored in the checkpoint, as fp8 checkpoints for SGLang/vLLM carry them:
// a scalar `model.layers.{i}.self_attn.k_scale` (or `.kv_scale`, or `.attn.k_scale`) per
// layer, already in the dequantize-multiplier convention. Empty when the checkpoint has none;
// an error when only some layers have one.
Result<std::vector<float>> CheckpointKvScales(const Checkpoint& checkpoint, const ModelConfig& config);

// The per-layer scales a cache of `format` uses: the file's when `path` is given, else the
// checkpoint's when the format has per-tensor scales, else none (1.0). `source` (optional)
// receives "file PATH", "checkpoint" or "1.0 (none: ...)" for the start-up log.
Result<std::vector<float>> ResolveKvScales(const std::string& path, const Checkpoint& checkpoint,
                                           const ModelConfig& config, KvFormat format, std::string* source = nullptr);

}  // namespace mlaserve::cli
