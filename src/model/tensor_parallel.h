// Tensor parallelism (--tp-size N, N MPI ranks): what each rank holds and computes, and the
// collectives the forward pass needs, as an interface the model calls (dist/ implements it
// over MPI; the model never sees MPI).
//
// What rank r of N holds (docs/distributed.md):
//   - replicated: the embedding, every norm, q_a_proj, kv_a_proj_with_mqa, the router (gate and
//     its correction bias): every rank computes the latent and the routing of every token, and
//     keeps the whole latent KV cache (MLA caches one latent per token, not per head);
//   - by heads: q_b_proj (or q_proj) and kv_b_proj, rows of heads ShardRange(heads, 1);
//   - by output rows: o_proj, the dense MLP's and the shared experts' gate/up (rows of the
//     intermediate) and down (rows of hidden), lm_head (rows of the vocabulary), in ranges of
//     ShardRange(rows, RowUnit(matrix));
//   - routed experts whole: experts ShardRange(n_routed_experts, 1) (expert parallelism).
// No reduction dimension is ever split: every output value is the same sum, in the same order,
// as on one rank, and ranks exchange finished values (all-gathers). So N ranks produce the
// logits of one rank bit for bit with --enable-deterministic-inference. Outside it, the MoE
// layers' routed experts are combined the way most engines do: each rank sums its own experts'
// weighted outputs per token and one all-reduce adds the ranks' partial sums (k times fewer
// bytes than gathering the k outputs; within tolerance of one rank).
#pragma once

#include <cstdint>
#include <span>

namespace mlaserve {

// Rank `rank` of `size`'s share of `total` items taken in units of `unit` items: [begin, end),
// as even as whole units allow, in rank order; the last rank also takes the rows past the last
// whole unit (an fp8 matrix's partial last scale block).
struct ShardRangeResult {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t count() const { return end - begin; }
};
inline ShardRangeResult ShardRange(int64_t total, int64_t unit, int rank, int size) {
  const int64_t units = total / unit;
  return {unit * (units * rank / size), rank + 1 == size ? total : unit * (units * (rank + 1) / size)};
}

// Rows of a row-sharded matrix go in units of a kernel panel (16 rows), or of the scale block
// for fp8 block-scaled weights (a rank's rows then start a scale row of their own).
inline constexpr int64_t kShardRowUnit = 16;
inline int64_t ShardRowUnit(bool fp8_block_scaled, int64_t block_rows) {
  return fp8_block_scaled && block_rows > kShardRowUnit ? block_rows : kShardRowUnit;
}

// Rank 0 starts each forward call on every rank by broadcasting a header of this many bytes
// (Model::Forward's arguments follow); a header of zeros tells the workers to stop.
inline constexpr int64_t kTpCallHeaderBytes = 256;

// The collectives of one tensor-parallel group, called by every rank in the same order from the
// thread that runs Model::Forward. Blocking; a failed peer ends the job (MPI aborts it), so they
// return nothing.
class TpCollectives {
 public:
  virtual ~TpCollectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank 0's `bytes` bytes at data to every rank. idle: the receivers may wait long (a worker
  // between forward calls), so they poll with sleeps instead of spinning; every rank must pass
  // the same `idle` for one broadcast.
  virtual void Broadcast(void* data, int64_t bytes, bool idle) = 0;
  // In place: data holds size() blocks back to back, block r of counts[r] floats written by rank
  // r; afterwards every rank has every block.
  virtual void AllGather(float* data, std::span<const int64_t> counts) = 0;
  // The same, but only rank 0 receives (the other ranks' data is left as it was).
  virtual void GatherToRoot(float* data, std::span<const int64_t> counts) = 0;
  // In place: data[0, count) becomes the sum of every rank's, in an order MPI chooses (so not
  // bit-identical to one rank's sum: used only outside deterministic mode).
  virtual void AllReduceSum(float* data, int64_t count) = 0;
  // Rank 0: the workers (ranks 1..) now wait for forward calls (Model::RunTpWorker).
  virtual void WorkersListening() = 0;
  // Rank 0: broadcasts the stop header once, if the workers listen; later calls do nothing.
  virtual void StopWorkers() = 0;
};

}  // namespace mlaserve
