#include "cli/model_setup.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include "cli/kv_scales.h"
#include "core/log.h"
#include "kernels/kernel_choice.h"
#include "dist/mpi_group.h"
#include "tokenizer/unicode_version.h"

namespace mlaserve::cli {

ModelFlags ReadModelFlags(Args& args, ForwardSize forward_size) {
  ModelFlags f;
  f.model_path = args.Str("model-path", "", "model directory (config.json, *.safetensors, tokenizer) or a GGUF file",
                          {.value_name = "DIR|FILE.gguf"});
  f.tokenizer_path = args.Str("tokenizer-path", "", "the tokenizer's directory (tokenizer.json or tiktoken.model, "
                              "tokenizer_config.json, its chat template), or a GGUF file",
                              {.value_name = "DIR", .shown_default = "--model-path"});
  f.trust_remote_code = args.Switch(
      "trust-remote-code", "accepted for SGLang command lines; no effect (mlaserve runs no code from the checkpoint)");
  f.kernels = args.Str("kernels", "auto",
                       "compute kernels: auto (measured on this host at start-up, docs/kernels.md), portable, avx2, "
                       "avx512, avx512-bf16, avx512-bf16:N (bf16 dot products from N = 2, 17 or 65 tokens); an avx512 one "
                       "+int8: GGUF Q8_0 / Q6_K / Q5_K / Q4_K / Q4_0 and int4-g32 weights multiplied by int8 activations (e.g. avx512+int8)");
  // (Also refuses a kernel set this CPU cannot run: the flag's value is wrong for this machine.)
  if (auto kernels = KernelsByName(f.kernels); !kernels.ok()) args.Reject("--kernels: " + kernels.error());
  f.options.num_threads = args.Int("threads", 0, "worker threads; 0: one per core", {.min = 0});
  f.options.deterministic = args.Switch(
      "enable-deterministic-inference",
      "batch- and chunk-invariant results: a token's logits do not depend on what shares its step or how its prompt "
      "was chunked (SGLang's flag); off: faster reduction orders, within tolerance");
  f.options.max_context = args.OptInt("context-length", "longest sequence, prompt plus generated tokens",
                                      {.shown_default = "min(max_position_embeddings, 4096)", .min = 1})
                              .value_or(0);  // 0: the model's default
  constexpr int kFixedForwardTokens = 512;
  f.max_batch_tokens =
      forward_size == ForwardSize::kFixed
          ? args.OptInt("max-batch-tokens", "tokens one forward call holds; longer prompts are chunked",
                        {.shown_default = "512", .min = 1})
          : args.OptInt("max-batch-tokens", "tokens one forward call holds; at least the default",
                        {.shown_default = "--chunked-prefill-size + --max-running-requests", .min = 1});
  f.options.max_batch_tokens = f.max_batch_tokens.value_or(kFixedForwardTokens);  // kEngineStep: ReadEngineFlags
  f.kv_cache_dtype = args.Str("kv-cache-dtype", "auto",
                              "KV cache format: auto (the model's dtype), bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, "
                              "fp8_ds_mla, fp4_e2m1, mxfp4, nvfp4 (docs/kv-formats.md)",
                              {.value_name = "FORMAT"});
  if (auto format = ParseKvCacheDtype(f.kv_cache_dtype, "bf16"); !format.ok()) args.Reject(format.error());
  f.kv_scales = args.Str("kv-scales", "", "per-layer KV scales from mlaserve kv-calibrate (plain fp8, nvfp4)",
                         {.value_name = "FILE", .shown_default = "the checkpoint's, else 1.0"});
  f.page_size = args.Int("page-size", 16, "tokens per KV page", {.min = 1, .max = 4096});
  const std::string log_level = args.Str("log-level", "info", "log lines below this level are dropped",
                                         {.choices = {"debug", "info", "warning", "error"}});
  if (auto level = ParseLogLevel(log_level); level.ok()) SetLogLevel(*level);  // a bad name: args.Finish says so
  f.device_memory_gb = args.Double("device-memory", 0.0, "memory the KV budget is computed from, in GB",
                                   {.value_name = "GB", .shown_default = "physical memory", .min = 0});
  f.mem_fraction_static = args.Double("mem-fraction-static", 0.88, "fraction of --device-memory for weights + KV",
                                      {.above = 0, .max = 1});
  f.max_total_tokens = args.Int64("max-total-tokens", 0, "caps the KV pool's tokens",
                                  {.shown_default = "what the budget holds", .min = 0});
  f.tp_size = args.Int("tp-size", 1,
                       "tensor-parallel ranks: run as `mpirun -np N mlaserve ... --tp-size N` (docs/distributed.md)",
                       {.min = 1});
  const int tp_alias = args.Int("tp", 1, "same as --tp-size", {.min = 1});
  if (tp_alias != 1 && f.tp_size != 1 && tp_alias != f.tp_size) {
    args.Reject("--tp " + std::to_string(tp_alias) + " and --tp-size " + std::to_string(f.tp_size) + " disagree");
  }
  if (tp_alias != 1) f.tp_size = tp_alias;
  // What this launch can run is known before anything loads: a flag problem, reported with the
  // others (exit 2). The job itself is checked again when the model joins it (LoadModel).
  const std::string tp_flag = tp_alias != 1 ? "--tp" : "--tp-size";
  if (f.tp_size > 1 && !dist::LaunchedByMpirun()) {
    args.Reject(tp_flag + " " + std::to_string(f.tp_size) + " runs as an MPI job: start it as `mpirun -np " +
                std::to_string(f.tp_size) + " mlaserve ...` (this process was not started by mpirun)");
  } else if (const std::optional<int> ranks = dist::MpirunJobSize(); ranks && *ranks != f.tp_size) {
    args.Reject("mpirun started " + std::to_string(*ranks) + " ranks but " + tp_flag + " is " +
                std::to_string(f.tp_size) + ": give " + tp_flag + " " + std::to_string(*ranks));
  }
  return f;
}

namespace {

// The tensor-parallel group this process belongs to: nullptr for one process (tp_size 1, not
// started by mpirun). Errors: --tp-size > 1 without mpirun, or a job of another size.
Result<dist::MpiGroup*> JoinTensorParallelJob(int tp_size) {
  if (tp_size == 1 && !dist::LaunchedByMpirun()) return nullptr;
  auto group = dist::MpiGroup::Get();
  if (!group.ok()) {
    return Status::Error("--tp-size " + std::to_string(tp_size) + " runs as an MPI job: start it as `mpirun -np " +
                         std::to_string(tp_size) + " mlaserve ...` (" + group.error() + ")");
  }
  static bool joined = false;
  if ((*group)->size() != tp_size) {
    return Status::Error("mpirun started " + std::to_string((*group)->size()) + " ranks but --tp-size is " +
                         std::to_string(tp_size) + ": give --tp-size " + std::to_string((*group)->size()));
  }
  if (tp_size == 1) return nullptr;
  if (joined) return Status::Error("a tensor-parallel job runs one model (--compare-model-path and the like need tp 1)");
  joined = true;
  return *group;
}

// A step every rank of a tensor-parallel job takes together: all go on only if it succeeded on
// all of them (a rank's own error is returned; the others learn that one failed). One process:
// `status` itself.
Status Agree(dist::MpiGroup* group, const Status& status) {
  if (group == nullptr || group->AllOk(status.ok())) return status;
  if (!status.ok()) return status;
  return Status::Error("another tensor-parallel rank failed to load (its error is above)");
}

// Ranks 1..: rank 0's forward calls until it stops them, then the end of the process. Shutdown
// signals are rank 0's to act on (it drains, then stops the workers), so they are ignored here.
[[noreturn]] void ServeForwardCalls(Model& model, dist::MpiGroup& group) {
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  const Status status = model.RunTpWorker();
  if (!status.ok()) {
    std::fprintf(stderr, "mlaserve: tensor-parallel rank %d: %s\n", group.rank(), status.message().c_str());
    group.Abort(1);
  }
  Log(LogLevel::kInfo, "[mlaserve] tensor-parallel rank %d: stopped by rank 0", group.rank());
  std::exit(0);
}

}  // namespace

Result<LoadedModel> LoadModel(const ModelFlags& flags, bool need_tokenizer) {
  if (!need_tokenizer && !flags.tokenizer_path.empty()) {
    return Status::Error("--tokenizer-path: this command reads no tokenizer");
  }
  if (flags.model_path.empty()) return Status::Error("--model-path is required");
  if (flags.trust_remote_code) {
    Log(LogLevel::kWarning,
        "[mlaserve] --trust-remote-code has no effect (mlaserve runs no model code from the checkpoint)");
  }
  LoadedModel loaded;
  auto tp = JoinTensorParallelJob(flags.tp_size);
  if (!tp.ok()) return tp.status();
  dist::MpiGroup* group = *tp;
  // Rank 0 chooses (the other ranks compute with the table each call names, so they never measure:
  // their measuring at once would only slow each other down).
  if (group == nullptr || group->rank() == 0) {
    auto kernels = ChooseKernels(flags.kernels, flags.options.deterministic);
    if (!kernels.ok()) return kernels.status();
    loaded.kernels = kernels->kernels;
    loaded.kernel_choice = kernels->Describe();
    Log(LogLevel::kDebug, "[mlaserve] %s", loaded.kernel_choice.c_str());
  } else {
    loaded.kernels = KernelsByName("auto").value();
  }
  ModelOptions options = flags.options;
  options.tp = group;
  if (group != nullptr && options.num_threads == 0) {
    // The machine's cores shared by its ranks.
    options.num_threads = std::max(1, ThreadPool::DefaultThreadCount() / group->local_size());
  }
  // LoadedModel::load_line (SGLang's "Load weight begin." is not printed: a checkpoint that fails
  // to load gets one line, its error); shared by the ranks of one machine.
  const double avail_before_bytes = AvailableMemoryBytes();
  const auto load_start = std::chrono::steady_clock::now();
  auto model = Model::Load(flags.model_path, options);
  MLA_RETURN_IF_ERROR(Agree(group, model.status()));
  loaded.model = std::move(model).value();
  const ModelConfig& config = loaded.model->config();
  const double avail_after_bytes = AvailableMemoryBytes();
  // Unreadable (AvailableMemoryBytes 0): said so, not printed as a measured 0.
  char memory[96] = "avail mem=unknown, mem usage=unknown";
  if (avail_before_bytes > 0 && avail_after_bytes > 0) {
    std::snprintf(memory, sizeof memory, "avail mem=%.2f GB, mem usage=%.2f GB", avail_after_bytes / 1e9,
                  (avail_before_bytes - avail_after_bytes) / 1e9);
  }
  char load_line[256];
  std::snprintf(load_line, sizeof load_line, "Load weight end. elapsed=%.2f s, type=%s, dtype=%s, %s.",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count(),
                config.model_type.c_str(), config.torch_dtype.empty() ? "bfloat16" : config.torch_dtype.c_str(),
                memory);
  loaded.load_line = load_line;
  if (!config.tensor_prefix.empty()) {
    Log(LogLevel::kInfo, "[mlaserve] %s: serving its text model (tensors %s*)%s", config.model_type.c_str(),
        config.tensor_prefix.c_str(),
        config.has_vision_tower
            ? "; the vision tower (vision_tower.*, mm_projector.*) is not loaded, so image and video inputs are refused"
            : "");
  }
  auto format = ParseKvCacheDtype(flags.kv_cache_dtype, config.torch_dtype);
  MLA_RETURN_IF_ERROR(Agree(group, format.status()));
  MLA_RETURN_IF_ERROR(Agree(group, ValidateKvFormatDims(*format, config.kv_lora_rank, config.qk_rope_head_dim)));
  loaded.kv_cache.kv_format = *format;
  loaded.kv_cache.page_size = flags.page_size;
  // Ranks on one machine share its memory.
  const double device_memory_bytes = flags.device_memory_gb > 0 || group == nullptr
                                         ? flags.device_memory_gb * 1e9
                                         : PhysicalMemoryBytes() / group->local_size();
  auto budget = ComputeKvBudget(KvBudgetRequest{
      .device_memory_bytes = device_memory_bytes,
      .mem_fraction_static = flags.mem_fraction_static,
      .weight_bytes = double(loaded.model->weight_bytes() + flags.draft_weight_bytes),
      // NEXTN: the MTP layer's rows too (one more layer, at the same page ids); EAGLE3: the
      // draft's k and v rows.
      .kv_bytes_per_token = KvRowBytes(*format, config.kv_lora_rank, config.qk_rope_head_dim) *
                                size_t(config.num_hidden_layers + (flags.options.load_mtp ? 1 : 0)) +
                            flags.draft_kv_bytes_per_token,
      .max_total_tokens = flags.max_total_tokens,
      .page_size = flags.page_size});
  MLA_RETURN_IF_ERROR(Agree(group, budget.status()));
  loaded.kv_budget = *budget;
  auto scales = ResolveKvScales(flags.kv_scales, loaded.model->checkpoint(), config, *format, &loaded.kv_scales_source);
  MLA_RETURN_IF_ERROR(Agree(group, scales.status()));
  loaded.kv_cache.kv_tensor_scales = std::move(scales).value();
  if (group != nullptr) {
    // Every rank keeps the whole latent cache: the job holds what its smallest budget holds.
    loaded.kv_budget.max_total_num_tokens = group->AllMin(budget->max_total_num_tokens);
    Log(LogLevel::kInfo,
        "[mlaserve] tensor parallel: rank %d of %d (pid %d), %d threads, weights of this rank %.3f GB (of %.3f GB), "
        "KV pool %lld tokens (the smallest rank's budget)",
        group->rank(), group->size(), int(getpid()), loaded.model->pool().num_threads(),
        double(loaded.model->weight_bytes()) / 1e9,
        double(loaded.model->checkpoint().total_tensor_bytes()) / 1e9,
        (long long)loaded.kv_budget.max_total_num_tokens);
  }
  loaded.kv_cache.pool_tokens =
      std::min<int64_t>(loaded.kv_budget.max_total_num_tokens, loaded.model->max_context());
  if (group != nullptr && group->rank() != 0) ServeForwardCalls(*loaded.model, *group);  // does not return
  if (group != nullptr) group->WorkersListening();
  if (need_tokenizer) {
    auto tokenizer = Tokenizer::FromDirectory(TokenizerPath(flags));
    if (!tokenizer.ok()) return tokenizer.status();
    loaded.tokenizer.emplace(std::move(tokenizer).value());
    if (auto warning = UnicodeVersionWarning(TokenizerUnicodeVersion())) {
      Log(LogLevel::kWarning, "[mlaserve] warning: %s", warning->c_str());
    }
  }
  return loaded;
}

Result<EngineKv> CreateEngineKv(const LoadedModel& loaded, int page_size) {
  const ModelConfig& c = loaded.model->config();
  const int64_t num_pages = loaded.kv_budget.max_total_num_tokens / page_size;
  auto storage = HostKvStorage::Create(KvStorageShape{.format = loaded.kv_cache.kv_format,
                                                      .num_layers = c.num_hidden_layers,
                                                      .latent_dim = c.kv_lora_rank,
                                                      .rope_dim = c.qk_rope_head_dim,
                                                      .page_size = page_size,
                                                      .num_pages = num_pages});
  if (!storage.ok()) return storage.status();
  if (!loaded.kv_cache.kv_tensor_scales.empty()) {
    MLA_RETURN_IF_ERROR((*storage)->SetTensorScales(loaded.kv_cache.kv_tensor_scales));
  }
  auto allocator = PageAllocator::Create(page_size, num_pages);
  if (!allocator.ok()) return allocator.status();
  return EngineKv{.allocator = std::move(allocator).value(), .storage = std::move(storage).value()};
}

}  // namespace mlaserve::cli
