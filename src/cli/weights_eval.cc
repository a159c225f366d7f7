// mlaserve weights-eval: what quantized weights cost in quality, against the checkpoint's own
// dense weights. The checkpoint is quantized on the fly (fp8-block, int4-g32, as `quantize`
// writes them, into a scratch directory) unless --compare-model-path names quantized copies; then
// teacher-forced over held-out text (MODEL/heldout.txt by default): perplexity, mean and p99
// per-token KL(dense || quantized), top-1 agreement, and weight bytes.
//
// The same for kernel tables (--compare-kernels, by default the bf16 dot-product table where the
// CPU has one): the dense weights computed by that table against the fp32 reference, and each
// quantized copy computed by it (a row "fp8-block + avx512-bf16", beside the copy's own row: the
// bf16 tables multiply fp8 and int4 codes in bf16 too; the +int8 tables multiply GGUF Q8_0 /
// Q6_K / Q5_K / Q4_K / Q4_0 and int4-g32 codes by int8 activations and leave dense weights to
// their base). Every other row computes with the fp32
// table of the widest ISA (KernelsByName("auto")), unless --kernels names a table, so that a
// quantization's row measures the weights alone.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/json_file.h"
#include "cli/heldout_tokens.h"
#include "cli/logit_stats.h"
#include "cli/model_setup.h"
#include "core/read_file.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "model/quantize.h"

namespace mlaserve::cli {
namespace {

struct Candidate {
  std::string name;
  std::string path;
  std::unique_ptr<LoadedModel> loaded;
  const Model* model = nullptr;  // what the runner computes with (loaded's, or borrowed)
  std::unique_ptr<SequenceRunner> runner;
  LogitAgreement agreement;  // against the dense checkpoint
};

}  // namespace

int RunWeightsEval(Args& args) {
  ModelFlags model_flags = ReadModelFlags(args);
  const std::string data_arg = args.Str("data", "", "held-out text", {.value_name = "FILE",
                                                                     .shown_default = "MODEL/heldout.txt"});
  const std::vector<std::string> compare = args.All(
      "compare-model-path", "quantized copies of --model-path to evaluate (default: quantize it now to fp8-block "
      "and int4-g32)", {.value_name = "DIR"});
  std::vector<std::string> compare_kernels = args.All(
      "compare-kernels", "kernel tables to evaluate on the dense weights against the fp32 reference (default: "
      "avx512-bf16 where the CPU has AVX512-BF16, avx512+int8 where it has AVX512-VNNI)", {.value_name = "NAME"});
  const int max_tokens = args.Int("max-tokens", 8192, "teacher-forced tokens at most (>= --window)", {.min = 2});
  const int window = args.Int("window", 512, "tokens per teacher-forced sequence", {.min = 2});
  const std::string json_path = args.Str("json", "", "also write the results as JSON", {.value_name = "FILE"});
  if (max_tokens < window) args.Reject("--max-tokens must be >= --window");
  if (!args.WasGiven("compare-kernels")) {
    if (CpuSupportsBf16Dot()) compare_kernels.push_back("avx512-bf16");
    if (CpuSupportsInt8Dot()) compare_kernels.push_back("avx512+int8");
  }
  std::vector<const KernelSet*> kernel_candidates;
  for (const std::string& name : compare_kernels) {
    auto k = KernelsByName(name);
    if (!k.ok()) args.Reject("--compare-kernels: " + k.error());
    else kernel_candidates.push_back(*k);
  }
  if (auto exit_code = args.Finish()) return *exit_code;
  // The reference's table: fp32, unless --kernels names one (auto would measure, and may choose bf16).
  if (model_flags.kernels == "auto") model_flags.kernels = KernelsByName("auto").value()->name;

  auto base = LoadModel(model_flags, /*need_tokenizer=*/true);
  if (!base.ok()) return Fail("weights-eval", base.error());
  Model& model = *base->model;
  const int vocab = model.config().vocab_size;
  if (window + 1 > model.max_context()) return Fail("weights-eval", "--window exceeds the context length", 2);

  // Candidates: the given directories, or fresh quantizations in a scratch directory.
  std::vector<Candidate> candidates;
  const std::filesystem::path scratch =
      std::filesystem::temp_directory_path() / ("mlaserve-weights-eval-" + std::to_string(::getpid()));
  struct ScratchGuard {
    std::filesystem::path path;
    ~ScratchGuard() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } guard{scratch};
  if (compare.empty()) {
    for (QuantScheme scheme : {QuantScheme::kFp8Block, QuantScheme::kInt4G32}) {
      const std::string dir = (scratch / QuantSchemeName(scheme)).string();
      auto report = QuantizeCheckpoint(model_flags.model_path, dir, scheme);
      if (!report.ok()) return Fail("weights-eval", std::string(QuantSchemeName(scheme)) + ": " + report.error());
      candidates.push_back(Candidate{.name = QuantSchemeName(scheme), .path = dir});
    }
  } else {
    for (const std::string& dir : compare) candidates.push_back(Candidate{.name = dir, .path = dir});
  }
  for (const KernelSet* k : kernel_candidates) {
    Candidate cand{.name = std::string("kernels ") + k->name};
    auto runner = SequenceRunner::Create(model, *k, base->kv_cache);
    if (!runner.ok()) return Fail("weights-eval", runner.error());
    cand.runner = std::move(runner).value();
    candidates.push_back(std::move(cand));
  }
  for (Candidate& cand : candidates) {
    if (cand.runner != nullptr) continue;  // a kernel table's: the base model
    ModelFlags flags = model_flags;
    flags.model_path = cand.path;
    flags.tokenizer_path.clear();  // the base model's tokenizer scores every candidate
    auto loaded = LoadModel(flags, /*need_tokenizer=*/false);
    if (!loaded.ok()) return Fail("weights-eval", cand.name + ": " + loaded.error());
    cand.loaded = std::make_unique<LoadedModel>(std::move(loaded).value());
    auto runner = SequenceRunner::Create(*cand.loaded->model, *cand.loaded->kernels, cand.loaded->kv_cache);
    if (!runner.ok()) return Fail("weights-eval", runner.error());
    cand.runner = std::move(runner).value();
    cand.model = cand.loaded->model.get();
  }
  // Each quantized copy through each compared table.
  const size_t loaded_count = candidates.size();
  for (size_t i = 0; i < loaded_count; ++i) {
    if (candidates[i].loaded == nullptr) continue;
    for (const KernelSet* k : kernel_candidates) {
      const LoadedModel& copy = *candidates[i].loaded;
      Candidate cand{.name = candidates[i].name + " + " + k->name, .model = copy.model.get()};
      auto runner = SequenceRunner::Create(*copy.model, *k, copy.kv_cache);
      if (!runner.ok()) return Fail("weights-eval", runner.error());
      cand.runner = std::move(runner).value();
      candidates.push_back(std::move(cand));
    }
  }
  auto reference = SequenceRunner::Create(model, *base->kernels, base->kv_cache);
  if (!reference.ok()) return Fail("weights-eval", reference.error());

  auto heldout = ReadHeldoutTokens(model_flags.model_path, data_arg, *base->tokenizer, window);
  if (!heldout.ok()) return Fail("weights-eval", heldout.error());
  const std::string& data_path = heldout->path;
  const std::vector<TokenId>& ids = heldout->ids;
  const std::optional<TokenId> bos = base->tokenizer->bos_id();

  LogitAgreement reference_own;  // the dense model's own nll_sum and scored
  std::vector<float> ref_logits(size_t(window + 1) * vocab);
  std::vector<double> ref_lp(static_cast<size_t>(vocab)), cand_lp(static_cast<size_t>(vocab));
  std::vector<TokenId> input;
  const int num_windows = std::min(max_tokens, int(ids.size())) / window;
  for (int w = 0; w < num_windows; ++w) {
    TeacherForcedWindow(ids, bos, window, w, input);
    if (Status s = RunReferenceWindow(**reference, input, vocab, ref_logits, reference_own, ref_lp); !s.ok()) {
      return Fail("weights-eval", s.message());
    }
    for (Candidate& cand : candidates) {
      if (Status s = CompareWindow(*cand.runner, input, vocab, ref_logits, cand.agreement, ref_lp, cand_lp); !s.ok()) {
        return Fail("weights-eval", s.message());
      }
    }
  }

  const double ref_ppl = reference_own.Perplexity();
  std::printf("weights-eval: %s, %lld teacher-forced tokens of %s\n", model_flags.model_path.c_str(),
              (long long)reference_own.scored, data_path.c_str());
  std::printf("%-24s %10s %10s %12s %12s %10s %10s\n", "weights", "MB", "ppl", "ppl change", "mean KL", "p99 KL",
              "top-1");
  std::printf("%-24s %10.2f %10.3f %12s %12s %10s %10s\n",
              (std::string(model.config().torch_dtype.empty() ? "dense" : model.config().torch_dtype.c_str()) + " " +
               base->kernels->name).c_str(),
              double(model.weight_bytes()) / 1e6, ref_ppl, "-", "-", "-", "-");
  nlohmann::json out = {{"model", model_flags.model_path}, {"tokens", reference_own.scored}, {"reference_ppl", ref_ppl},
                         {"reference_kernels", base->kernels->name}};
  for (const Candidate& cand : candidates) {
    const LogitAgreement& a = cand.agreement;
    const double ppl = a.Perplexity(), mean_kl = a.MeanKl(), p99 = a.P99Kl(), top1 = a.Top1();
    const double mb = double((cand.model != nullptr ? *cand.model : model).weight_bytes()) / 1e6;
    std::printf("%-24s %10.2f %10.3f %+11.2f%% %12.3g %10.3g %9.2f%%\n", cand.name.c_str(), mb, ppl,
                100.0 * (ppl / ref_ppl - 1.0), mean_kl, p99, 100.0 * top1);
    out["weights"][cand.name] = {{"mb", mb}, {"ppl", ppl}, {"mean_kl", mean_kl}, {"p99_kl", p99}, {"top1", top1}};
  }
  if (!json_path.empty()) {
    if (Status s = WriteJsonFile(json_path, out); !s.ok()) return Fail("weights-eval", s.message());
  }
  return 0;
}

}  // namespace mlaserve::cli
