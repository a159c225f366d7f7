// The tensor-parallel group of an mpirun job: MPI's world communicator behind the model's
// TpCollectives (model/tensor_parallel.h). One per process, created by the first command that
// loads a model with --tp-size > 1, finalized when the process ends.
//
// Threads: MPI is initialized MPI_THREAD_SERIALIZED and only the thread that runs
// Model::Forward calls the collectives (one call at a time); the atexit stop runs on the main
// thread, so a command must have joined its engine thread before it exits (serve and batch do).
// AllReduceSum relies on every rank receiving the same bits of the sum (OpenMPI's reductions
// give every rank one result), since the ranks then route their tokens independently. A dead rank ends the job: OpenMPI's
// mpirun aborts every rank and names the one that died, so no call here waits forever.
#pragma once

#include <atomic>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "model/tensor_parallel.h"

namespace mlaserve::dist {

// Whether this process was started by mpirun (from OpenMPI's environment), without starting MPI:
// a process started directly never initializes MPI.
bool LaunchedByMpirun();
// The number of ranks mpirun started, when its environment says (OpenMPI's
// OMPI_COMM_WORLD_SIZE), without starting MPI; nullopt otherwise.
std::optional<int> MpirunJobSize();

// What the collectives moved and cost, since start-up (bench, the server's dashboard).
struct TpTraffic {
  int64_t calls = 0;           // collective calls (broadcasts of forward calls included)
  int64_t bytes_received = 0;  // by this rank
  int64_t ns = 0;              // wall time inside the collectives
  // [size] what each rank received, as this rank counts it: every rank runs the same collectives
  // with the same counts, so each knows what the others receive without asking them.
  std::vector<int64_t> bytes_received_by_rank;
};

class MpiGroup final : public TpCollectives {
 public:
  // Initializes MPI (once per process; later calls return the same group). Errors: not under
  // mpirun, or an MPI that cannot give MPI_THREAD_SERIALIZED.
  static Result<MpiGroup*> Get();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Ranks of this job on this machine (for default threads and memory per rank).
  int local_size() const { return local_size_; }

  void Broadcast(void* data, int64_t bytes, bool idle) override;
  void AllGather(float* data, std::span<const int64_t> counts) override;
  void GatherToRoot(float* data, std::span<const int64_t> counts) override;
  // Counts what a ring all-reduce receives, 2 (N - 1) / N of the vector (MPI picks the algorithm).
  void AllReduceSum(float* data, int64_t count) override;
  void WorkersListening() override { workers_listening_ = true; }
  void StopWorkers() override;

  // Every rank's `ok` and-ed: ranks that check the same thing agree before going on.
  bool AllOk(bool ok);
  // The minimum of every rank's value.
  int64_t AllMin(int64_t value);

  // A snapshot of the counters: the engine thread adds to them, any thread may read (the
  // dashboard's handler threads).
  TpTraffic traffic() const;
  // Ends every rank of the job (MPI_Abort) with exit code `code`.
  [[noreturn]] void Abort(int code);

 private:
  MpiGroup() = default;
  ~MpiGroup() = default;
  static void Finalize();  // atexit: StopWorkers, then MPI_Finalize
  // counts_ and displs_ for blocks of counts[r] floats back to back; returns the other ranks'
  // floats (what this rank receives when it receives them all).
  int64_t SetBlocks(std::span<const int64_t> counts);
  // Adds received(r) bytes to rank r's count, for every rank.
  template <class Received>
  void CountByRank(Received&& received) {
    for (int r = 0; r < size_; ++r) bytes_by_rank_[size_t(r)].fetch_add(received(r), std::memory_order_relaxed);
  }

  int rank_ = 0;
  int size_ = 1;
  int local_size_ = 1;
  bool workers_listening_ = false;
  std::atomic<int64_t> traffic_calls_{0}, traffic_bytes_{0}, traffic_ns_{0};  // TpTraffic's fields
  std::unique_ptr<std::atomic<int64_t>[]> bytes_by_rank_;                    // [size_]
  std::vector<int> counts_, displs_;  // [size] MPI's int arguments, reused
};

}  // namespace mlaserve::dist
