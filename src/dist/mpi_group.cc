#include "dist/mpi_group.h"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace mlaserve::dist {
namespace {

MpiGroup* g_group = nullptr;  // the process's group, once MPI is initialized

// Times one collective into the traffic counters.
class TrafficScope {
 public:
  TrafficScope(std::atomic<int64_t>& calls, std::atomic<int64_t>& bytes, std::atomic<int64_t>& ns, int64_t bytes_received)
      : ns_(ns), start_(std::chrono::steady_clock::now()) {
    calls.fetch_add(1, std::memory_order_relaxed);
    bytes.fetch_add(bytes_received, std::memory_order_relaxed);
  }
  ~TrafficScope() {
    ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count(),
                  std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t>& ns_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

bool LaunchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

std::optional<int> MpirunJobSize() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size == nullptr) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(size, &end, 10);
  if (end == size || *end != '\0' || n < 1 || n > (1 << 20)) return std::nullopt;
  return int(n);
}

Result<MpiGroup*> MpiGroup::Get() {
  if (g_group != nullptr) return g_group;
  if (!LaunchedByMpirun()) return Status::Error("not started by mpirun");
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    return Status::Error("MPI_Init_thread failed");
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return Status::Error("this MPI library does not support MPI_THREAD_SERIALIZED");
  }
  auto* group = new MpiGroup();
  MPI_Comm_rank(MPI_COMM_WORLD, &group->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &group->size_);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, group->rank_, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &group->local_size_);
  MPI_Comm_free(&local);
  group->bytes_by_rank_ = std::make_unique<std::atomic<int64_t>[]>(size_t(group->size_));
  group->counts_.resize(size_t(group->size_));
  group->displs_.resize(size_t(group->size_));
  g_group = group;
  std::atexit(&MpiGroup::Finalize);
  return g_group;
}

void MpiGroup::Finalize() {
  if (g_group == nullptr) return;
  g_group->StopWorkers();
  MPI_Finalize();
}

void MpiGroup::StopWorkers() {
  if (rank_ != 0 || !workers_listening_) return;
  workers_listening_ = false;
  char header[kTpCallHeaderBytes] = {};
  Broadcast(header, kTpCallHeaderBytes, /*idle=*/true);
}

TpTraffic MpiGroup::traffic() const {
  TpTraffic t{.calls = traffic_calls_.load(std::memory_order_relaxed),
              .bytes_received = traffic_bytes_.load(std::memory_order_relaxed),
              .ns = traffic_ns_.load(std::memory_order_relaxed)};
  for (int r = 0; r < size_; ++r) t.bytes_received_by_rank.push_back(bytes_by_rank_[size_t(r)].load(std::memory_order_relaxed));
  return t;
}

void MpiGroup::Broadcast(void* data, int64_t bytes, bool idle) {
  TrafficScope scope(traffic_calls_, traffic_bytes_, traffic_ns_, rank_ == 0 ? 0 : bytes);
  CountByRank([&](int r) { return r == 0 ? 0 : bytes; });
  if (!idle) {
    MPI_Bcast(data, int(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
    return;
  }
  // Nonblocking on every rank (a nonblocking collective matches only nonblocking ones): rank 0
  // waits for it, a worker between calls polls, backing off to 1 ms sleeps, so an idle job uses
  // no CPU.
  MPI_Request request;
  MPI_Ibcast(data, int(bytes), MPI_BYTE, 0, MPI_COMM_WORLD, &request);
  if (rank_ == 0) {
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    return;
  }
  int done = 0;
  for (int polls = 0;; ++polls) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) break;
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(polls > 10000 ? 1000 : 50));
  }
}

int64_t MpiGroup::SetBlocks(std::span<const int64_t> counts) {
  int64_t offset = 0, others = 0;
  for (int r = 0; r < size_; ++r) {
    counts_[size_t(r)] = int(counts[size_t(r)]);
    displs_[size_t(r)] = int(offset);
    offset += counts[size_t(r)];
    if (r != rank_) others += counts[size_t(r)];
  }
  return others;
}

void MpiGroup::AllGather(float* data, std::span<const int64_t> counts) {
  TrafficScope scope(traffic_calls_, traffic_bytes_, traffic_ns_, SetBlocks(counts) * int64_t(sizeof(float)));
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  CountByRank([&](int r) { return (total - counts[size_t(r)]) * int64_t(sizeof(float)); });
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts_.data(), displs_.data(), MPI_FLOAT, MPI_COMM_WORLD);
}

void MpiGroup::GatherToRoot(float* data, std::span<const int64_t> counts) {
  const int64_t others = SetBlocks(counts);
  TrafficScope scope(traffic_calls_, traffic_bytes_, traffic_ns_, rank_ == 0 ? others * int64_t(sizeof(float)) : 0);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  CountByRank([&](int r) { return r == 0 ? (total - counts[0]) * int64_t(sizeof(float)) : 0; });
  if (rank_ == 0) {
    MPI_Gatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts_.data(), displs_.data(), MPI_FLOAT, 0, MPI_COMM_WORLD);
  } else {
    MPI_Gatherv(data + displs_[size_t(rank_)], counts_[size_t(rank_)], MPI_FLOAT, nullptr, nullptr, nullptr, MPI_FLOAT,
                0, MPI_COMM_WORLD);
  }
}

void MpiGroup::AllReduceSum(float* data, int64_t count) {
  const int64_t received = 2 * (size_ - 1) * count * int64_t(sizeof(float)) / size_;
  TrafficScope scope(traffic_calls_, traffic_bytes_, traffic_ns_, received);
  CountByRank([&](int) { return received; });
  MPI_Allreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

void MpiGroup::Abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return
}

bool MpiGroup::AllOk(bool ok) {
  int value = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&value, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all != 0;
}

int64_t MpiGroup::AllMin(int64_t value) {
  int64_t all = 0;
  MPI_Allreduce(&value, &all, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

}  // namespace mlaserve::dist
