// The default ModelRunner: one Model's forward pass on this machine's CPU cores, with the kernel
// table chosen at start-up. It is the only code that computes with the model: the model's
// workspace, thread pool and rope tables belong to the Model it borrows; the logits buffer is
// its own, sized once (ReserveLogitsRows). The KV bytes are a KvStorage on the runner's side
// (its constructor's caller owns it): plans carry page ids, which index it; the page
// bookkeeping (which ids are free, whose they are) is the scheduler's and never seen here.
#pragma once

#include <vector>

#include "engine/model_runner.h"
#include "kernels/kernels.h"
#include "kvcache/kv_storage.h"
#include "model/model.h"

namespace mlaserve {

class CpuModelRunner final : public ModelRunner {
 public:
  // model, kernels and kv (the bytes of the plans' pages) must outlive the runner.
  CpuModelRunner(Model& model, const KernelSet& kernels, KvStorage& kv);

  const ModelRunnerInfo& info() const override { return info_; }
  void ReserveLogitsRows(int max_logits_rows) override;
  Result<ModelRunnerOutput> Execute(const BatchPlan& plan) override;

 private:
  Model& model_;
  const KernelSet& kernels_;
  KvStorage& kv_;
  ModelRunnerInfo info_;
  std::vector<ForwardSegment> segments_;  // [plan.sequences.size()], reused
  std::vector<float> logits_;             // [max_logits_rows, vocab]
};

}  // namespace mlaserve
