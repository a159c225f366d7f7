// Writes a dense Hugging Face DeepSeek checkpoint (config.json, safetensors, tokenizer.json)
// as a deepseek2 GGUF file, as llama.cpp's converter lays it out (model/gguf_model.h has the
// names and keys): `mlaserve quantize --out-format gguf`. Tests make their GGUF files with it
// from the bundled model; users can compare mlaserve's GGUF path with its safetensors path.
// Matrices are written in `matrix_type` (F32, F16, BF16, Q8_0 as llama.cpp's reference
// quantizer writes it, Q4_0 likewise, or Q6_K / Q5_K / Q4_K by plain max-based rules; a matrix whose rows are not whole
// blocks of its type, e.g. 1408 columns in a 256-value K type, in Q8_0), vectors (norms, the router's
// correction bias) in F32; the router stays in the matrix type (llama.cpp's converter writes it
// in F32), so that a bf16 file computes exactly as its original. Routed experts are stacked per
// layer and projection. The MTP layers (past num_hidden_layers) are not written. kv_b_proj is written whole (attn_kv_b, older files)
// or split (attn_k_b / attn_v_b with the *_mla head sizes, newer files).
// The whole output is assembled in memory before it is written: for small checkpoints (tests,
// the bundled and reference models), not for a 700 GB one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gguf.h"

namespace mlaserve {

struct GgufExportOptions {
  GgmlType matrix_type = GgmlType::kBF16;  // kF32, kF16, kBF16, kQ8_0, kQ6_K, kQ5_K, kQ4_K or kQ4_0
  bool split_kv_b = false;
  // > 0: a split GGUF of at most this many tensors a shard (gguf-split's --split-max-tensors),
  // out_path without ".gguf" as the shards' prefix.
  size_t split_max_tensors = 0;
};

struct GgufExportReport {
  size_t num_tensors = 0;
  uint64_t output_bytes = 0;
  std::vector<std::string> paths;  // the file, or the shards
};

Result<GgufExportReport> WriteGgufCheckpoint(const std::string& model_dir, const std::string& out_path,
                                             const GgufExportOptions& options);

}  // namespace mlaserve
