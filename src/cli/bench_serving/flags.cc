// bench-serving's flags, SGLang's names and defaults: where the server is, which endpoint, the
// dataset and its lengths, the arrival rate and concurrency, warm-up, output.
#include <limits>
#include <optional>

#include "cli/bench_serving/bench_serving.h"

namespace mlaserve::cli::bench_serving {

ServingFlags ReadServingFlags(Args& args) {
  ServingFlags f;
  f.backend_name = args.Str("backend", "sglang", "sglang: POST /generate; openai: /v1/completions; "
                            "openai-chat: /v1/chat/completions",
                            {.choices = {"sglang", "sglang-native", "openai", "sglang-oai", "openai-chat",
                                         "sglang-oai-chat"}});
  const std::optional<std::string> base_url =
      args.OptStr("base-url", "the server", {.value_name = "URL", .shown_default = "http://HOST:PORT"});
  const std::string host = args.Str("host", "127.0.0.1", "the server's host, without --base-url");
  const int port = args.Int("port", 30000, "the server's port, without --base-url", {.min = 1, .max = 65535});
  f.model = args.Str("model", "", "the model name sent", {.shown_default = "the first of /v1/models"});
  f.dataset_path = args.Str("dataset-path", "", "jsonl: {\"prompt\", \"output_len\"} per line; sharegpt: "
                            "ShareGPT's JSON array", {.value_name = "FILE"});
  f.dataset_name = args.Str("dataset-name", f.dataset_path.empty() ? "random" : "jsonl", "where prompts come from",
                            {.shown_default = "jsonl with --dataset-path, else random",
                             .choices = {"random", "jsonl", "sharegpt"}});
  f.tokenizer = args.Str("tokenizer", "", "sharegpt: the model's tokenizer directory, to count tokens",
                         {.value_name = "DIR"});
  f.sharegpt_output_len = args.Int("sharegpt-output-len", 0, "sharegpt: output tokens per request",
                                   {.shown_default = "the conversation's answer length", .min = 0});
  f.sharegpt_context_len = args.Int("sharegpt-context-len", 0, "sharegpt: skip pairs whose prompt + output exceed it",
                                    {.shown_default = "no limit", .min = 0});
  f.num_prompts = args.Int("num-prompts", 64, "requests", {.min = 1});
  f.random_input_len = args.Int("random-input-len", 256, "prompt tokens per request, at most", {.min = 1});
  f.random_output_len = args.Int("random-output-len", 256, "output tokens per request, at most", {.min = 1});
  f.random_range_ratio = args.Double("random-range-ratio", 1.0, "lengths are uniform in [len x ratio, len]",
                                     {.min = 0, .max = 1});
  f.vocab_size = args.Int("vocab-size", 0, "vocabulary for random token ids",
                          {.shown_default = "what the server reports", .min = 0});
  f.request_rate = args.Double("request-rate", std::numeric_limits<double>::infinity(),
                               "requests per second, Poisson arrivals; inf: all at once", {.above = 0});
  f.max_concurrency = args.Int("max-concurrency", 0, "requests in flight at most; 0: no limit", {.min = 0});
  f.warmup_requests = args.Int("warmup-requests", 1, "requests sent before timing", {.min = 0});
  f.seed = uint64_t(args.Int64("seed", 1, "seed of the random lengths and prompts"));
  f.ignore_eos = !args.Switch("disable-ignore-eos", "stop requests at the end-of-sequence token");
  f.disable_progress = args.Switch("disable-progress", "no progress display");
  f.output_file = args.Str("output-file", "", "append the results as one JSON line", {.value_name = "JSONL"});

  if (f.backend_name == "openai" || f.backend_name == "sglang-oai") f.backend = Backend::kOpenAi;
  else if (f.backend_name == "openai-chat" || f.backend_name == "sglang-oai-chat") f.backend = Backend::kOpenAiChat;
  else f.backend = Backend::kSglang;
  if (f.dataset_name == "jsonl" && f.dataset_path.empty()) {
    args.Reject("--dataset-name jsonl needs --dataset-path FILE");
  }
  if (f.dataset_name == "random" && !f.dataset_path.empty()) args.Reject("--dataset-path needs --dataset-name jsonl");
  if (f.dataset_name == "sharegpt" && (f.dataset_path.empty() || f.tokenizer.empty())) {
    args.Reject("--dataset-name sharegpt needs --dataset-path FILE.json and --tokenizer DIR (to count tokens)");
  }
  // Each dataset's own flags, refused by name with another (never accepted and ignored).
  for (const char* flag : {"tokenizer", "sharegpt-output-len", "sharegpt-context-len"}) {
    if (f.dataset_name != "sharegpt" && args.WasGiven(flag)) args.Reject("--" + std::string(flag) + " is for --dataset-name sharegpt");
  }
  for (const char* flag : {"random-input-len", "random-output-len", "random-range-ratio"}) {
    if (f.dataset_name == "sharegpt" && args.WasGiven(flag)) args.Reject("--" + std::string(flag) + " is not used by --dataset-name sharegpt");
  }
  f.base_url = base_url ? *base_url : "http://" + host + ":" + std::to_string(port);
  while (!f.base_url.empty() && f.base_url.back() == '/') f.base_url.pop_back();
  if (auto parsed = HttpClient::ParseUrl(f.base_url); !parsed.ok()) args.Reject(parsed.error());
  return f;
}

}  // namespace mlaserve::cli::bench_serving
