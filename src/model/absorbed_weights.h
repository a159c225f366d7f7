// Per-head copies of kv_b_proj in panels: each head's W_UK^T [kv_lora, nope] and W_UV [v, kv_lora]
// for the absorbed decode (model/mla_decode_attention.cc, mla_attention.cc), and W_UK [nope,
// kv_lora] with the same W_UV for the MHA prefill's keys and values (mla_prefill_attention.cc), so
// that every kv_b product runs through the matmul kernels (bf16 and int8 dot products, prefetched
// panels, packed activations) instead of reading kv_b row by row (decode: ~20 GB/s on a host
// whose panels stream at 60; a Q8_0 prefill spent about as long decompressing keys and values as
// in every other product).
//
// Formats: W_UV and W_UK copies for dense kv_b (F32, BF16, F16) and every grouped format (int4,
// int8 = GGUF's Q8_0 / Q6_K, uint4 and uint8 with mins = Q4_K / Q4_0 / Q5_K); the W_UK^T copy for
// dense and the grouped codes but int4: it keeps the codes, and before each head's copy a table of
// that head's W_UK scales transposed (and its mins), which the query's multiply reads
// (ScaleAbsorbedQuery: x[d] = q_nope[d] * scale(d, g) for output group g, minus sum_d q_nope[d] *
// min(d, g) after the product; read from kv_b's own scales, strided by the groups, it was a
// quarter of a Q6_K decode's kv_b phase: docs/benchmarks.md, "Q6_K decode: the absorbed query's
// kv_b work"). An int8 table multiplies a grouped copy in one pass a head
// (KernelSet::grouped_query_product: the table, then the codes, the next head's table fetched
// meanwhile), bit for bit the plain path's groups (MultiplyAbsorbedQuery). fp8 blocks get all
// three copies where each head's W_UK and W_UV rows are whole bands of the block grid (DeepSeek-V3: 128 x 128 blocks, nope = v = 128), each copy with its
// bands' scales (W_UK^T's blocks transposed, so its query is multiplied as it is, one product a
// head); where a band spans two heads' rows, none. A product without its copy keeps the
// row-major path. A GGUF's split pair kept in its formats (AttentionWeights::k_b, v_b, kv_b
// empty) always gets copies: W_UK^T and W_UV packed as they are (k_b's groups run along nope, the
// query's own input: one product a head, no scale table), and W_UK for the MHA form k_b
// transposed and widened to F32 as WeightAt forms each weight, exact for Q8_0 (its groups would
// run along W_UK's rows); a pair whose format would not pack is refused at load.
//
// Ownership: the copies and tables live in ModelWeights::absorbed_storage; kv_b stays as it is
// (the formats without copies read it), so resident memory grows by about 1.5 times kv_b's bytes,
// and the tables by one float (two with mins) per W_UK row and group: ~0.06 times kv_b's bytes
// for Q8_0, ~0.1 for Q6_K (~0.25% of a bf16 or Q8_0 DeepSeek-V3's weights in all; its own fp8
// gets copies of 1.5 times kv_b's bytes too). A split pair's copies are its bytes again (the pair itself is given back after
// packing) plus W_UK in F32: 4 bytes a W_UK weight, 32 MiB a layer for DeepSeek-V3's 128 heads
// (~2 GB over 61 layers). Like the workspace, they are not in Model::weight_bytes (the KV budget's
// subtraction, which `plan` predicts): they live in the headroom --mem-fraction-static leaves.
#pragma once

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/weights.h"

namespace mlaserve {

// The absorbed query's scaled copies, one per W_UK scale group, on a worker's stack (floats:
// DeepSeek's nope 128 times 512 / 32 groups of Q8_0 is 2048, 4096 for Q6_K's groups of 16); a
// kv_b whose copies would need more gets none.
inline constexpr int64_t kMaxAbsorbedQueryFloats = 8192;
// Scale groups of a W_UK row the query scaling takes (stack scratch): kv_lora 1024 in groups of 16.
inline constexpr int64_t kMaxAbsorbedQueryGroups = kGroupedQueryMaxGroups;

// Fills every layer's AttentionWeights::uk_t, uv and uk (the MTP layer's too) from its kv_b, which
// holds kv_b.rows / (nope + v) heads (a tensor-parallel rank's), or from its split pair. An error
// when the memory is not there or a split pair's format does not pack.
[[nodiscard]] Status PackAbsorbedWeights(ModelWeights& weights, const ModelConfig& config, ThreadPool& pool);

// Whether the layer's W_UV and W_UK products (the absorbed output, the MHA form's keys and
// values) go through copies, and whether the absorbed query does (W_UK^T).
inline bool HasPanelCopies(const AttentionWeights& a) { return !a.uv.empty(); }
inline bool HasTransposedCopies(const AttentionWeights& a) { return !a.uk_t.empty(); }

// x[g * nope + d] = q_nope[d] * (the scale of kv_b's W_UK row d of head `head` in column group g)
// for every group g < kv_lora / block_cols and d < nope: the queries a W_UK^T copy of grouped codes
// multiplies, x + g * nope for its output group g (rows [g * block_cols, (g + 1) * block_cols)).
// With mins (uint4 / uint8 codes), min_sums[g] = sum_d q_nope[d] * (that row's min in group g):
// the caller subtracts it from each of group g's outputs (real = code * scale - min), summed in d
// order by k.axpy_f32. Reads the head's table (AttentionWeights::uk_t_scales), not kv_b: only for
// a grouped W_UK^T copy (a dense copy multiplies q_nope itself).
void ScaleAbsorbedQuery(const KernelSet& k, const AttentionWeights& a, const ModelConfig& config, int64_t head,
                        const float* q_nope, float* x, float* min_sums);

// q_lat[0, kv_lora) = W_UK^T of head `head` times q_nope (one token), through the layer's W_UK^T
// copy (HasTransposedCopies): a copy without a scale table is one product; a grouped one takes
// k.grouped_query_product where the table has it (one pass over the head's table and codes), else
// the plain path it must equal bit for bit: ScaleAbsorbedQuery, then matmul_panels a group at a
// time and the group's min sum off each output.
void MultiplyAbsorbedQuery(const KernelSet& k, const AttentionWeights& a, const ModelConfig& config, int64_t head,
                           const float* q_nope, float* q_lat);

}  // namespace mlaserve
