// mlaserve kv-eval: what each KV cache format costs in quality, against the bf16 cache.
// Teacher-forced over held-out text (the bundled model's heldout.txt by default): perplexity and
// its change, mean and p99 per-token KL(bf16 || format), top-1 agreement; from many prompts,
// the mean length of greedy continuation identical to bf16's; and what each format costs in
// bytes per token and buys in tokens for a given budget. Prints a table, writes JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/json_file.h"
#include "cli/heldout_tokens.h"
#include "core/read_file.h"
#include "cli/kv_scales.h"
#include "cli/logit_stats.h"
#include "cli/model_setup.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"

namespace mlaserve::cli {
namespace {

struct FormatStats {
  KvFormat format;
  LogitAgreement agreement;  // against the bf16 cache (the reference's own: nll_sum, scored)
  double continuation_sum = 0.0;
  int continuations = 0;
};

}  // namespace

int RunKvEval(Args& args) {
  ModelFlags model_flags = ReadModelFlags(args);
  const std::string data_arg = args.Str("data", "", "held-out text", {.value_name = "FILE",
                                                                     .shown_default = "MODEL/heldout.txt"});
  const std::string formats_arg = args.Str("formats", "all", "KV formats to compare with bf16, comma-separated",
                                           {.value_name = "all|F,F,..."});
  const int max_tokens = args.Int("max-tokens", 8192, "teacher-forced tokens at most (>= --window)", {.min = 2});
  const int window = args.Int("window", 512, "tokens per teacher-forced sequence", {.min = 2});
  const int num_prompts = args.Int("num-prompts", 32, "greedy continuations compared", {.min = 0});
  const int prompt_len = args.Int("prompt-len", 64, "tokens per continuation prompt", {.min = 1});
  const int continuation_len = args.Int("continuation-len", 32, "tokens per greedy continuation", {.min = 1});
  const double budget_gb = args.Double("budget-gb", 10.0, "KV budget for the tokens-that-fit column",
                                       {.value_name = "GB", .above = 0});
  const std::string json_path = args.Str("json", "", "also write the results as JSON", {.value_name = "FILE"});
  if (max_tokens < window) args.Reject("--max-tokens must be >= --window");
  // Each format gets its own one-context cache (--page-size applies): the engine's KV budget
  // and the single cache format are not what kv-eval measures.
  for (const char* flag : {"kv-cache-dtype", "device-memory", "mem-fraction-static", "max-total-tokens"}) {
    if (args.WasGiven(flag)) {
      args.Reject(std::string("--") + flag + " has no effect on kv-eval (it compares --formats, each in a cache of one "
                  "context; --budget-gb sets the tokens-that-fit column)");
    }
  }
  if (auto exit_code = args.Finish()) return *exit_code;
  std::vector<KvFormat> formats;
  if (formats_arg == "all") {
    for (KvFormat f : kAllKvFormats) {
      if (f != KvFormat::kBF16 && f != KvFormat::kF32) formats.push_back(f);
    }
  } else {
    std::stringstream ss(formats_arg);
    std::string name;
    while (std::getline(ss, name, ',')) {
      auto f = ParseKvCacheDtype(name, "bf16");
      if (!f.ok()) return Fail("kv-eval", f.error(), 2);
      formats.push_back(*f);
    }
  }

  auto loaded = LoadModel(model_flags, /*need_tokenizer=*/true);
  if (!loaded.ok()) return Fail("kv-eval", loaded.error());
  Model& model = *loaded->model;
  const ModelConfig& c = model.config();
  const int vocab = c.vocab_size;
  if (window + 1 > model.max_context() || prompt_len + continuation_len > model.max_context()) {
    return Fail("kv-eval", "--window or --prompt-len + --continuation-len exceeds the context length", 2);
  }
  auto heldout = ReadHeldoutTokens(model_flags.model_path, data_arg, *loaded->tokenizer, window);
  if (!heldout.ok()) return Fail("kv-eval", heldout.error());
  const std::string& data_path = heldout->path;
  const std::vector<TokenId>& ids = heldout->ids;
  const std::optional<TokenId> bos = loaded->tokenizer->bos_id();

  auto make_runner = [&](KvFormat f) -> Result<std::unique_ptr<SequenceRunner>> {
    auto scales = ResolveKvScales(model_flags.kv_scales, model.checkpoint(), c, f);
    if (!scales.ok()) return scales.status();
    SequenceRunnerOptions o{.kv_format = f, .kv_tensor_scales = std::move(scales).value(),
                            .page_size = model_flags.page_size};
    return SequenceRunner::Create(model, *loaded->kernels, o);
  };
  auto reference = make_runner(KvFormat::kBF16);
  if (!reference.ok()) return Fail("kv-eval", reference.error());
  std::vector<FormatStats> stats;
  std::vector<std::unique_ptr<SequenceRunner>> runners;
  for (KvFormat f : formats) {
    auto r = make_runner(f);
    if (!r.ok()) return Fail("kv-eval", std::string(KvFormatName(f)) + ": " + r.error());
    runners.push_back(std::move(r).value());
    stats.push_back(FormatStats{.format = f});
  }
  FormatStats ref_stats{.format = KvFormat::kBF16};

  // Teacher-forced windows: [bos] + window tokens; every token after the first is scored.
  std::vector<float> ref_logits(size_t(window + 1) * vocab);
  std::vector<double> ref_lp(static_cast<size_t>(vocab)), cand_lp(static_cast<size_t>(vocab));
  std::vector<TokenId> input;
  const int num_windows = std::min(max_tokens, int(ids.size())) / window;
  for (int w = 0; w < num_windows; ++w) {
    TeacherForcedWindow(ids, bos, window, w, input);
    if (Status s = RunReferenceWindow(**reference, input, vocab, ref_logits, ref_stats.agreement, ref_lp); !s.ok()) {
      return Fail("kv-eval", s.message());
    }
    for (size_t fi = 0; fi < formats.size(); ++fi) {
      if (Status s = CompareWindow(*runners[fi], input, vocab, ref_logits, stats[fi].agreement, ref_lp, cand_lp);
          !s.ok()) {
        return Fail("kv-eval", s.message());
      }
    }
  }

  // Greedy continuations from prompts spread over the data.
  std::vector<TokenId> ref_tokens, tokens;
  auto greedy = [&](SequenceRunner& r, std::span<const TokenId> prompt, std::vector<TokenId>& out) -> Status {
    r.Reset();
    out.clear();
    MLA_RETURN_IF_ERROR(r.Append(prompt));
    for (int i = 0; i < continuation_len; ++i) {
      const TokenId next = ArgMax(r.last_logits());
      out.push_back(next);
      if (i + 1 < continuation_len) MLA_RETURN_IF_ERROR(r.Append(std::span(&next, 1)));
    }
    return Status::Ok();
  };
  const int64_t stride = std::max<int64_t>(1, (int64_t(ids.size()) - prompt_len) / std::max(1, num_prompts));
  for (int p = 0; p < num_prompts; ++p) {
    input.clear();
    if (bos) input.push_back(*bos);
    const int64_t start = int64_t(p) * stride;
    if (start + prompt_len > int64_t(ids.size())) break;
    input.insert(input.end(), ids.begin() + start, ids.begin() + start + prompt_len);
    if (Status s = greedy(**reference, input, ref_tokens); !s.ok()) return Fail("kv-eval", s.message());
    for (size_t fi = 0; fi < formats.size(); ++fi) {
      if (Status s = greedy(*runners[fi], input, tokens); !s.ok()) return Fail("kv-eval", s.message());
      size_t same = 0;
      while (same < tokens.size() && tokens[same] == ref_tokens[same]) ++same;
      stats[fi].continuation_sum += double(same);
      stats[fi].continuations++;
    }
  }

  // Report.
  const double ref_ppl = ref_stats.agreement.Perplexity();
  const size_t ref_bytes = KvRowBytes(KvFormat::kBF16, c.kv_lora_rank, c.qk_rope_head_dim) * size_t(c.num_hidden_layers);
  std::printf("kv-eval: %s, %lld teacher-forced tokens from %s (%d windows of %d), %d greedy "
              "continuations of %d tokens; reference: bf16 KV cache\n\n",
              model_flags.model_path.c_str(), (long long)ref_stats.agreement.scored, data_path.c_str(),
              num_windows, window, stats.empty() ? 0 : stats[0].continuations, continuation_len);
  std::printf("| format | bytes/token | tokens in %.0f GB | perplexity | delta ppl | mean KL | p99 KL | top-1 agree | identical greedy tokens (of %d) |\n",
              budget_gb, continuation_len);
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| bf16 (reference) | %zu | %lld | %.4f | 0 | 0 | 0 | 100.00%% | %d |\n", ref_bytes,
              (long long)(budget_gb * 1e9 / double(ref_bytes)), ref_ppl, continuation_len);
  nlohmann::json out;
  out["model"] = model_flags.model_path;
  out["data"] = data_path;
  out["teacher_forced_tokens"] = ref_stats.agreement.scored;
  out["continuation_len"] = continuation_len;
  out["budget_gb"] = budget_gb;
  out["formats"].push_back({{"format", "bf16"}, {"bytes_per_token", ref_bytes}, {"perplexity", ref_ppl}});
  for (const FormatStats& st : stats) {
    const double ppl = st.agreement.Perplexity(), kl_mean = st.agreement.MeanKl(), kl_p99 = st.agreement.P99Kl(),
                 agree = st.agreement.Top1();
    const double mean_same = st.continuation_sum / std::max(1, st.continuations);
    const size_t bytes = KvRowBytes(st.format, c.kv_lora_rank, c.qk_rope_head_dim) * size_t(c.num_hidden_layers);
    const long long fit = (long long)(budget_gb * 1e9 / double(bytes));
    std::printf("| %s | %zu | %lld | %.4f | %+.4f | %.5f | %.5f | %.2f%% | %.1f |\n", KvFormatName(st.format),
                bytes, fit, ppl, ppl - ref_ppl, kl_mean, kl_p99, 100.0 * agree, mean_same);
    out["formats"].push_back({{"format", KvFormatName(st.format)},
                              {"bytes_per_token", bytes},
                              {"tokens_in_budget", fit},
                              {"perplexity", ppl},
                              {"delta_perplexity", ppl - ref_ppl},
                              {"kl_mean", kl_mean},
                              {"kl_p99", kl_p99},
                              {"top1_agreement", agree},
                              {"mean_identical_greedy_tokens", mean_same}});
  }
  if (!json_path.empty()) {
    if (Status s = WriteJsonFile(json_path, out); !s.ok()) return Fail("kv-eval", s.message());
  }
  return 0;
}

}  // namespace mlaserve::cli
