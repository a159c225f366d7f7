// mlaserve bench-serving: like SGLang's bench_serving. Sends N streaming requests to a running
// server (SGLang's native /generate, or the OpenAI completions / chat endpoints), at a Poisson
// request rate or all at once, optionally capped at C in flight, and prints SGLang's "Serving
// Benchmark Result" block: throughput, TTFT, TPOT, ITL and end-to-end latency.
// Metric definitions follow SGLang's: TTFT is the time to the first chunk that carries tokens;
// ITL the gaps between later token chunks (for /generate, a gap spanning k tokens counts as k
// gaps of gap/k); TPOT (latency - TTFT) / (output tokens - 1); concurrency the sum of E2E
// latencies over the duration. Token counts come from the server (meta_info / usage) when it
// reports them, so no tokenizer is needed here.
// Threads: a pool of workers, one per allowed in-flight request, takes requests in order and
// sleeps until each one's arrival time; the main thread only reports progress.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

#include "cli/commands.h"
#include "core/percentile.h"
#include "core/read_file.h"
#include "engine/sampler.h"
#include "server/http_client.h"
#include "server/sse.h"

namespace mlaserve::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr int kControlTimeoutMs = 10'000;        // /v1/models, /get_model_info
constexpr int kStreamIdleTimeoutMs = 3'600'000;  // a queued request may wait long for its first byte

enum class Backend { kSglang, kOpenAi, kOpenAiChat };

// One prompt to send. Either token ids (sglang backend, random dataset, vocabulary known) or text.
struct BenchRequest {
  std::string text;
  std::vector<int64_t> input_ids;
  int prompt_len_estimate = 0;  // tokens: exact for ids, one per word for text
  int output_len = 0;           // max new tokens asked for
};

struct RequestResult {
  bool success = false;
  std::string error;
  double latency_s = 0;      // request sent -> last event received
  double ttft_s = 0;         // request sent -> first chunk carrying tokens
  std::vector<double> itl_s; // gaps between later token chunks
  int prompt_len = 0;        // from the server when it said, else the estimate
  int output_len = 0;        // from the server when it said, else token chunks seen
};

struct ServingFlags {
  std::string backend_name;
  Backend backend = Backend::kSglang;
  std::string base_url;
  std::string model;  // empty: ask the server
  std::string dataset_name;
  std::string dataset_path;
  int num_prompts = 0;
  int random_input_len = 0;
  int random_output_len = 0;
  double random_range_ratio = 0;
  int vocab_size = 0;  // 0: ask the server; unknown: send words instead of ids
  double request_rate = 0;  // requests/s; inf: all at once
  int max_concurrency = 0;  // 0: not set
  int warmup_requests = 0;
  uint64_t seed = 0;
  bool ignore_eos = true;
  bool disable_progress = false;
  std::string output_file;
};

// Lengths uniform in [len * range_ratio, len]: SGLang's random dataset rule, as bench-offline.
int RandomLen(int len, double range_ratio, uint64_t seed, uint64_t i) {
  const int low = std::max(1, int(len * range_ratio));
  return low + int(CounterUniform(seed, i) * (len - low + 1));
}

// Common English words, most of them one token in BPE vocabularies (with the leading space), so
// a prompt of N words is roughly N tokens without a tokenizer. The server's count is what counts.
constexpr const char* kWords[] = {
    "the",   "of",    "and",   "to",     "in",     "is",    "you",   "that",  "it",    "he",
    "was",   "for",   "on",    "are",    "as",     "with",  "his",   "they",  "at",    "be",
    "this",  "have",  "from",  "or",     "one",    "had",   "by",    "word",  "but",   "not",
    "what",  "all",   "were",  "we",     "when",   "your",  "can",   "said",  "there", "use",
    "an",    "each",  "which", "she",    "do",     "how",   "their", "if",    "will",  "up",
    "other", "about", "out",   "many",   "then",   "them",  "these", "so",    "some",  "her",
    "would", "make",  "like",  "him",    "into",   "time",  "has",   "look",  "two",   "more",
    "write", "go",    "see",   "number", "no",     "way",   "could", "people", "my",   "than",
    "first", "water", "been",  "call",   "who",    "oil",   "its",   "now",   "find",  "long",
    "down",  "day",   "did",   "get",    "come",   "made",  "may",   "part",  "over",  "new",
    "sound", "take",  "only",  "little", "work",   "know",  "place", "year",  "live",  "me",
    "back",  "give",  "most",  "very",   "after",  "thing", "our",   "just",  "name",  "good",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

std::string RandomWords(int num_words, uint64_t seed) {
  std::string text;
  for (int w = 0; w < num_words; ++w) {
    if (w > 0) text += ' ';
    text += kWords[size_t(CounterUniform(seed, uint64_t(w)) * kNumWords) % kNumWords];
  }
  return text;
}

int CountWords(const std::string& text) {
  int n = 0;
  bool in_word = false;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!space && !in_word) ++n;
    in_word = !space;
  }
  return n;
}

std::vector<BenchRequest> RandomDataset(const ServingFlags& f) {
  std::vector<BenchRequest> out;
  for (int i = 0; i < f.num_prompts; ++i) {
    BenchRequest r;
    const int n = RandomLen(f.random_input_len, f.random_range_ratio, f.seed, uint64_t(2 * i));
    r.output_len = RandomLen(f.random_output_len, f.random_range_ratio, f.seed, uint64_t(2 * i + 1));
    r.prompt_len_estimate = n;
    if (f.backend == Backend::kSglang && f.vocab_size > 0) {
      r.input_ids.resize(size_t(n));
      for (int t = 0; t < n; ++t) {
        r.input_ids[size_t(t)] = int64_t(CounterUniform(f.seed + 1 + uint64_t(i), uint64_t(t)) * f.vocab_size);
      }
    } else {
      r.text = RandomWords(n, f.seed + 1 + uint64_t(i));
    }
    out.push_back(std::move(r));
  }
  return out;
}

// JSONL, one {"prompt": TEXT, "output_len"?: N} per line; the first num_prompts lines are used.
Result<std::vector<BenchRequest>> JsonlDataset(const ServingFlags& f) {
  auto file = ReadWholeFile(f.dataset_path);
  if (!file.ok()) return file.status();
  std::vector<BenchRequest> out;
  size_t pos = 0;
  for (int line_no = 1; pos < file->size() && int(out.size()) < f.num_prompts; ++line_no) {
    const size_t end = std::min(file->find('\n', pos), file->size());
    const std::string line = file->substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, false);
    const std::string where = f.dataset_path + ":" + std::to_string(line_no);
    if (j.is_discarded() || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
      return Status::Error(where + ": want {\"prompt\": TEXT, \"output_len\": N}");
    }
    BenchRequest r;
    r.text = j["prompt"].get<std::string>();
    r.prompt_len_estimate = CountWords(r.text);
    r.output_len = f.random_output_len;
    if (j.contains("output_len")) {
      if (!j["output_len"].is_number_integer() || j["output_len"].get<int64_t>() <= 0) {
        return Status::Error(where + ": output_len must be a positive integer");
      }
      r.output_len = j["output_len"].get<int>();
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) return Status::Error(f.dataset_path + ": no prompts");
  return out;
}

// Seconds after the start at which each request is sent: exponential gaps (a Poisson process)
// drawn from the seed, or all zero for an infinite rate.
std::vector<double> ArrivalTimes(int num_requests, double request_rate, uint64_t seed) {
  std::vector<double> at_s(size_t(num_requests), 0.0);
  if (std::isinf(request_rate)) return at_s;
  double t = 0;
  for (int i = 0; i < num_requests; ++i) {
    at_s[size_t(i)] = t;
    const double u = CounterUniform(seed ^ 0x9e3779b97f4a7c15ULL, uint64_t(i));
    t += -std::log1p(-u) / request_rate;
  }
  return at_s;
}

std::string EndpointPath(Backend b) {
  switch (b) {
    case Backend::kSglang: return "/generate";
    case Backend::kOpenAi: return "/v1/completions";
    case Backend::kOpenAiChat: return "/v1/chat/completions";
  }
  return "/generate";
}

std::string RequestBody(const ServingFlags& f, const std::string& model, const BenchRequest& r) {
  json body;
  switch (f.backend) {
    case Backend::kSglang:
      if (!r.input_ids.empty()) body["input_ids"] = r.input_ids;
      else body["text"] = r.text;
      body["sampling_params"] = {{"max_new_tokens", r.output_len}, {"temperature", 0.0}, {"ignore_eos", f.ignore_eos}};
      body["stream"] = true;
      break;
    case Backend::kOpenAi:
    case Backend::kOpenAiChat:
      body["model"] = model;
      if (f.backend == Backend::kOpenAi) body["prompt"] = r.text;
      else body["messages"] = json::array({{{"role", "user"}, {"content", r.text}}});
      body["max_tokens"] = r.output_len;
      body["temperature"] = 0.0;
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
      body["ignore_eos"] = f.ignore_eos;  // SGLang's extension to the OpenAI API
      break;
  }
  return body.dump(-1, ' ', false, json::error_handler_t::replace);  // a bad --model byte must not throw
}

// What a server reported, leniently: the integer at `key`, or `fallback` when obj is not an
// object or the value is absent or not an integer (server/client_json.h's IntField, for client
// input, refuses those instead).
int IntOr(const json& obj, const char* key, int fallback) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  return it != obj.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

// The text a streamed chunk adds: "text" (/generate), choices[0].text or choices[0].delta.content.
std::string ChunkText(Backend b, const json& chunk) {
  const json* holder = &chunk;
  const char* key = "text";
  if (b != Backend::kSglang) {
    auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array() || choices->empty()) return "";
    holder = &(*choices)[0];
    if (b == Backend::kOpenAiChat) {
      auto delta = holder->find("delta");
      if (delta == holder->end()) return "";
      holder = &*delta;
      key = "content";
    }
  }
  if (!holder->is_object()) return "";
  auto it = holder->find(key);
  return it != holder->end() && it->is_string() ? it->get<std::string>() : "";
}

// Sends one streaming request and times it.
RequestResult RunRequest(const HttpClient& client, const std::string& url, const HttpHeaders& headers,
                         const ServingFlags& f, const std::string& model, const BenchRequest& r) {
  RequestResult out;
  out.prompt_len = r.prompt_len_estimate;
  const std::string body = RequestBody(f, model, r);
  SseParser parser;
  int token_chunks = 0;
  int reported_output_len = -1;  // completion_tokens from the server, when it says
  int last_output_len = 0;
  bool done = false;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_token_at = start;

  auto on_event = [&](const SseEvent& event) {
    if (done || !out.error.empty()) return;
    const Clock::time_point now = Clock::now();
    out.latency_s = std::chrono::duration<double>(now - start).count();
    if (event.data == "[DONE]") {
      done = true;
      return;
    }
    const json chunk = json::parse(event.data, nullptr, false);
    if (chunk.is_discarded() || !chunk.is_object()) {
      out.error = "bad JSON in the stream: " + event.data.substr(0, 200);
      return;
    }
    if (auto err = chunk.find("error"); err != chunk.end()) {
      const json& message = err->is_object() && err->contains("message") ? (*err)["message"] : *err;
      out.error = "server error: " + (message.is_string() ? message.get<std::string>() : message.dump());
      return;
    }
    // How many new tokens this chunk carries, as SGLang's client decides it: /generate by the
    // growth of meta_info.completion_tokens, the OpenAI endpoints by non-empty text.
    int new_tokens = 0;
    if (f.backend == Backend::kSglang) {
      const json meta = chunk.value("meta_info", json::object());
      out.prompt_len = IntOr(meta, "prompt_tokens", out.prompt_len);
      const int completion = IntOr(meta, "completion_tokens", -1);
      if (completion >= 0) {
        reported_output_len = completion;
        new_tokens = std::max(0, completion - last_output_len);
        last_output_len = std::max(last_output_len, completion);
      } else {
        new_tokens = ChunkText(f.backend, chunk).empty() ? 0 : 1;
      }
    } else {
      new_tokens = ChunkText(f.backend, chunk).empty() ? 0 : 1;
      if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
        out.prompt_len = IntOr(*usage, "prompt_tokens", out.prompt_len);
        reported_output_len = IntOr(*usage, "completion_tokens", reported_output_len);
      }
    }
    if (new_tokens == 0) return;
    const double gap_s = std::chrono::duration<double>(now - last_token_at).count();
    if (token_chunks == 0) {
      out.ttft_s = gap_s;
    } else if (f.backend == Backend::kSglang) {
      out.itl_s.insert(out.itl_s.end(), size_t(new_tokens), gap_s / new_tokens);
    } else {
      out.itl_s.push_back(gap_s);
    }
    ++token_chunks;
    last_token_at = now;
  };
  auto on_data = [&](std::string_view piece) {
    parser.Feed(piece, on_event);
    return !done && out.error.empty();
  };
  Status s = client.Stream("POST", url, body, headers, kStreamIdleTimeoutMs, on_data);
  if (out.latency_s == 0) out.latency_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (!s.ok()) out.error = s.message();
  if (out.error.empty() && token_chunks == 0) out.error = "the stream ended without any token";
  out.output_len = reported_output_len >= 0 ? reported_output_len : token_chunks;
  out.success = out.error.empty();
  return out;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / double(v.size());
}

double StdDev(const std::vector<double>& v) {  // population, as numpy's np.std
  const double m = Mean(v);
  double sum = 0;
  for (double x : v) sum += (x - m) * (x - m);
  return v.empty() ? 0 : std::sqrt(sum / double(v.size()));
}

struct Summary {  // in milliseconds
  double mean = 0, median = 0, std = 0, p95 = 0, p99 = 0, max = 0;
};

Summary Summarize(const std::vector<double>& values_s) {
  Summary s{.mean = Mean(values_s) * 1e3,
            .median = Percentile(values_s, 50) * 1e3,
            .std = StdDev(values_s) * 1e3,
            .p95 = Percentile(values_s, 95) * 1e3,
            .p99 = Percentile(values_s, 99) * 1e3,
            .max = Percentile(values_s, 100) * 1e3};
  return s;
}

// A Python float's str(): "inf", "2.0", "0.25".
std::string PythonFloat(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

void Row(const char* label, const std::string& value) { std::printf("%-40s %-10s\n", label, value.c_str()); }
void Row(const char* label, long long value) { std::printf("%-40s %-10lld\n", label, value); }
void Row(const char* label, double value) { std::printf("%-40s %-10.2f\n", label, value); }

// Reports done/total on stderr: a redrawn bar on a terminal, else a line every few seconds.
class Progress {
 public:
  Progress(int total, bool enabled) : total_(total), enabled_(enabled), tty_(::isatty(2) == 1) {}

  void Update(int done, int failed, bool final) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    if (tty_) {
      if (done == last_done_ && !final) return;  // redraw only on change
      last_done_ = done;
      constexpr int kWidth = 40;
      const int filled = total_ > 0 ? done * kWidth / total_ : kWidth;
      std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(size_t(filled), '#').c_str(),
                   std::string(size_t(kWidth - filled), '.').c_str(), done, total_);
      if (failed > 0) std::fprintf(stderr, " (%d failed)", failed);
      if (final) std::fprintf(stderr, "\n");
    } else if (final || now - last_line_ >= std::chrono::seconds(5)) {
      std::fprintf(stderr, "bench-serving: %d/%d requests done%s\n", done, total_,
                   failed > 0 ? (" (" + std::to_string(failed) + " failed)").c_str() : "");
      last_line_ = now;
    }
    std::fflush(stderr);
  }

 private:
  int total_;
  bool enabled_;
  bool tty_;
  int last_done_ = -1;
  Clock::time_point last_line_ = Clock::now();
};

// Reads every flag; bad values and combinations are reported through args.Finish().
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
  f.dataset_path = args.Str("dataset-path", "", "JSONL of {\"prompt\", \"output_len\"}", {.value_name = "JSONL"});
  f.dataset_name = args.Str("dataset-name", f.dataset_path.empty() ? "random" : "jsonl", "where prompts come from",
                            {.shown_default = "jsonl with --dataset-path, else random",
                             .choices = {"random", "jsonl"}});
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
  f.base_url = base_url ? *base_url : "http://" + host + ":" + std::to_string(port);
  while (!f.base_url.empty() && f.base_url.back() == '/') f.base_url.pop_back();
  if (auto parsed = HttpClient::ParseUrl(f.base_url); !parsed.ok()) args.Reject(parsed.error());
  return f;
}

// The first id in GET /v1/models, or "default" when the server does not say. An error only
// when the server cannot be reached at all.
Result<std::string> DiscoverModel(const HttpClient& client, const std::string& base_url, const HttpHeaders& headers) {
  auto response = client.Request("GET", base_url + "/v1/models", "", headers, kControlTimeoutMs);
  if (!response.ok()) return Status::Error("cannot ask " + base_url + " for its model: " + response.error());
  if (response->status_code == 200) {
    const json j = json::parse(response->body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
      return j["data"][0]["id"].get<std::string>();
    }
  }
  std::fprintf(stderr, "bench-serving: no model id in %s/v1/models (HTTP %d); using \"default\"\n",
               base_url.c_str(), response->status_code);
  return std::string("default");
}

// vocab_size from GET /get_model_info, or 0 when the server does not say. An error only when the
// server cannot be reached at all.
Result<int> DiscoverVocabSize(const HttpClient& client, const std::string& base_url, const HttpHeaders& headers) {
  auto response = client.Request("GET", base_url + "/get_model_info", "", headers, kControlTimeoutMs);
  if (!response.ok()) return Status::Error("cannot ask " + base_url + " for its vocabulary: " + response.error());
  if (response->status_code != 200) return 0;
  const json j = json::parse(response->body, nullptr, false);
  return j.is_discarded() ? 0 : std::max(0, IntOr(j, "vocab_size", 0));
}

// Each request in flight holds a socket; the usual soft limit of 1024 descriptors is too few for
// a large --num-prompts at an infinite rate (SGLang's bench_serving raises it the same way).
void RaiseOpenFileLimit(int num_sockets) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t want = std::min<rlim_t>(limit.rlim_max, rlim_t(num_sockets) + 256);
  if (limit.rlim_cur >= want) return;
  limit.rlim_cur = want;
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

// Sends every request at its arrival time, at most max_concurrency at once, and waits for all.
// results[i] belongs to requests[i]; *duration_s spans the first send to the last answer.
std::vector<RequestResult> RunAll(const HttpClient& client, const std::string& url, const HttpHeaders& headers,
                                  const ServingFlags& f, const std::string& model,
                                  const std::vector<BenchRequest>& requests, double* duration_s) {
  const int num_requests = int(requests.size());
  const std::vector<double> arrival_s = ArrivalTimes(num_requests, f.request_rate, f.seed);
  std::vector<RequestResult> results(static_cast<size_t>(num_requests));
  std::atomic<int> next{0};
  std::mutex mu;
  std::condition_variable finished_cv;
  int num_done = 0, num_failed = 0;  // guarded by mu
  const Clock::time_point t0 = Clock::now();
  auto worker = [&] {
    for (int i = next.fetch_add(1); i < num_requests; i = next.fetch_add(1)) {
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(arrival_s[size_t(i)])));
      results[size_t(i)] = RunRequest(client, url, headers, f, model, requests[size_t(i)]);
      {
        std::lock_guard<std::mutex> lock(mu);
        ++num_done;
        if (!results[size_t(i)].success) ++num_failed;
      }
      finished_cv.notify_one();
    }
  };
  const int num_workers = f.max_concurrency > 0 ? std::min(f.max_concurrency, num_requests) : num_requests;
  RaiseOpenFileLimit(num_workers);
  std::vector<std::thread> workers;
  workers.reserve(size_t(num_workers));
  try {
    for (int w = 0; w < num_workers; ++w) workers.emplace_back(worker);
  } catch (const std::system_error& e) {
    // Fewer workers only lower the concurrency reached; every request is still sent.
    std::fprintf(stderr, "bench-serving: started %zu of %d request threads (%s)\n", workers.size(), num_workers,
                 e.what());
  }
  if (workers.empty()) worker();  // not even one thread: send them from here, one by one
  Progress progress(num_requests, !f.disable_progress);
  {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      const bool all_done = num_done == num_requests;
      progress.Update(num_done, num_failed, all_done);
      if (all_done) break;
      finished_cv.wait_for(lock, std::chrono::milliseconds(200));
    }
  }
  for (std::thread& t : workers) t.join();
  *duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return results;
}

// SGLang's calculate_metrics, over the successful requests.
struct Metrics {
  int completed = 0;
  long long total_input = 0, total_output = 0;  // tokens
  double duration_s = 0;
  double concurrency = 0;  // sum of E2E latencies / duration
  Summary ttft, tpot, itl, e2e;
};

Metrics ComputeMetrics(const std::vector<RequestResult>& results, double duration_s) {
  Metrics m{.duration_s = duration_s};
  std::vector<double> ttfts_s, tpots_s, itls_s, e2e_s;
  double e2e_sum_s = 0;
  for (const RequestResult& r : results) {
    if (!r.success) continue;
    ++m.completed;
    m.total_input += r.prompt_len;
    m.total_output += r.output_len;
    if (r.output_len > 1) tpots_s.push_back((r.latency_s - r.ttft_s) / (r.output_len - 1));
    itls_s.insert(itls_s.end(), r.itl_s.begin(), r.itl_s.end());
    ttfts_s.push_back(r.ttft_s);
    e2e_s.push_back(r.latency_s);
    e2e_sum_s += r.latency_s;
  }
  m.ttft = Summarize(ttfts_s);
  m.tpot = Summarize(tpots_s);
  m.itl = Summarize(itls_s);
  m.e2e = Summarize(e2e_s);
  m.concurrency = e2e_sum_s / duration_s;
  return m;
}

void PrintMetrics(const ServingFlags& f, const Metrics& m) {
  const double d = m.duration_s;
  std::printf("\n============ Serving Benchmark Result ============\n");
  Row("Backend:", f.backend_name);
  Row("Traffic request rate:", PythonFloat(f.request_rate));
  Row("Max request concurrency:", f.max_concurrency > 0 ? std::to_string(f.max_concurrency) : "not set");
  Row("Successful requests:", (long long)m.completed);
  Row("Benchmark duration (s):", d);
  Row("Total input tokens:", m.total_input);
  Row("Total generated tokens:", m.total_output);
  Row("Request throughput (req/s):", m.completed / d);
  Row("Input token throughput (tok/s):", m.total_input / d);
  Row("Output token throughput (tok/s):", m.total_output / d);
  Row("Total token throughput (tok/s):", (m.total_input + m.total_output) / d);
  Row("Concurrency:", m.concurrency);
  std::printf("----------------End-to-End Latency----------------\n");
  Row("Mean E2E Latency (ms):", m.e2e.mean);
  Row("Median E2E Latency (ms):", m.e2e.median);
  std::printf("---------------Time to First Token----------------\n");
  Row("Mean TTFT (ms):", m.ttft.mean);
  Row("Median TTFT (ms):", m.ttft.median);
  Row("P99 TTFT (ms):", m.ttft.p99);
  std::printf("-----Time per Output Token (excl. 1st token)------\n");
  Row("Mean TPOT (ms):", m.tpot.mean);
  Row("Median TPOT (ms):", m.tpot.median);
  Row("P99 TPOT (ms):", m.tpot.p99);
  std::printf("---------------Inter-Token Latency----------------\n");
  Row("Mean ITL (ms):", m.itl.mean);
  Row("Median ITL (ms):", m.itl.median);
  Row("P95 ITL (ms):", m.itl.p95);
  Row("P99 ITL (ms):", m.itl.p99);
  Row("Max ITL (ms):", m.itl.max);
  std::printf("==================================================\n");
  std::fflush(stdout);
}

// One run as one JSON object, with SGLang's key names (plus "failed").
json MetricsJson(const ServingFlags& f, const Metrics& m, int num_requests) {
  const double d = m.duration_s;
  return json{{"backend", f.backend_name},
              {"dataset_name", f.dataset_name},
              {"request_rate", std::isinf(f.request_rate) ? json("inf") : json(f.request_rate)},
              {"max_concurrency", f.max_concurrency > 0 ? json(f.max_concurrency) : json(nullptr)},
              {"random_input_len", f.random_input_len},
              {"random_output_len", f.random_output_len},
              {"random_range_ratio", f.random_range_ratio},
              {"duration", d},
              {"completed", m.completed},
              {"failed", num_requests - m.completed},
              {"total_input_tokens", m.total_input},
              {"total_output_tokens", m.total_output},
              {"request_throughput", m.completed / d},
              {"input_throughput", m.total_input / d},
              {"output_throughput", m.total_output / d},
              {"total_throughput", (m.total_input + m.total_output) / d},
              {"mean_e2e_latency_ms", m.e2e.mean},
              {"median_e2e_latency_ms", m.e2e.median},
              {"std_e2e_latency_ms", m.e2e.std},
              {"p99_e2e_latency_ms", m.e2e.p99},
              {"mean_ttft_ms", m.ttft.mean},
              {"median_ttft_ms", m.ttft.median},
              {"std_ttft_ms", m.ttft.std},
              {"p99_ttft_ms", m.ttft.p99},
              {"mean_tpot_ms", m.tpot.mean},
              {"median_tpot_ms", m.tpot.median},
              {"std_tpot_ms", m.tpot.std},
              {"p99_tpot_ms", m.tpot.p99},
              {"mean_itl_ms", m.itl.mean},
              {"median_itl_ms", m.itl.median},
              {"std_itl_ms", m.itl.std},
              {"p95_itl_ms", m.itl.p95},
              {"p99_itl_ms", m.itl.p99},
              {"max_itl_ms", m.itl.max},
              {"concurrency", m.concurrency}};
}

}  // namespace

int RunBenchServing(Args& args) {
  ServingFlags f = ReadServingFlags(args);
  if (auto exit_code = args.Finish()) return *exit_code;
  const HttpClient client;
  HttpHeaders headers = {{"Content-Type", "application/json"}};
  if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr && *key != '\0') {
    headers.emplace_back("Authorization", std::string("Bearer ") + key);
  }

  std::string model = f.model;
  if (model.empty() && f.backend != Backend::kSglang) {
    auto discovered = DiscoverModel(client, f.base_url, headers);
    if (!discovered.ok()) return Fail("bench-serving", discovered.error());
    model = *discovered;
  }
  if (f.backend == Backend::kSglang && f.dataset_name == "random" && f.vocab_size == 0) {
    auto discovered = DiscoverVocabSize(client, f.base_url, headers);
    if (!discovered.ok()) return Fail("bench-serving", discovered.error());
    f.vocab_size = *discovered;
    if (f.vocab_size == 0) {
      std::fprintf(stderr, "bench-serving: the server did not report vocab_size (give --vocab-size N to send "
                           "random token ids); sending random words as text\n");
    }
  }

  std::vector<BenchRequest> requests;
  if (f.dataset_name == "jsonl") {
    auto loaded = JsonlDataset(f);
    if (!loaded.ok()) return Fail("bench-serving", loaded.error());
    requests = std::move(loaded).value();
  } else {
    requests = RandomDataset(f);
  }
  const int num_requests = int(requests.size());
  long long planned_input = 0, planned_output = 0;
  for (const BenchRequest& r : requests) {
    planned_input += r.prompt_len_estimate;
    planned_output += r.output_len;
  }
  const std::string url = f.base_url + EndpointPath(f.backend);
  std::fprintf(stderr, "bench-serving: %d requests to %s%s; #input tokens ~%lld, #output tokens %lld\n",
               num_requests, url.c_str(), model.empty() ? "" : (" (model " + model + ")").c_str(), planned_input,
               planned_output);

  if (f.warmup_requests > 0) {
    std::fprintf(stderr, "bench-serving: starting warmup with %d sequences...\n", f.warmup_requests);
    BenchRequest warmup = requests[0];
    warmup.output_len = std::min(warmup.output_len, 32);
    for (int i = 0; i < f.warmup_requests; ++i) {
      RequestResult w = RunRequest(client, url, headers, f, model, warmup);
      if (!w.success) return Fail("bench-serving", "warmup request failed: " + w.error);
    }
  }

  double duration_s = 0;
  const std::vector<RequestResult> results = RunAll(client, url, headers, f, model, requests, &duration_s);
  const Metrics metrics = ComputeMetrics(results, duration_s);
  const auto first_failure = std::find_if(results.begin(), results.end(), [](const RequestResult& r) { return !r.success; });
  if (first_failure != results.end()) {
    std::fprintf(stderr, "bench-serving: %d of %d requests failed; first error: %s\n", num_requests - metrics.completed,
                 num_requests, first_failure->error.c_str());
  }
  PrintMetrics(f, metrics);
  if (!f.output_file.empty()) {
    std::ofstream out(f.output_file, std::ios::app);  // one line per run: SGLang's JSONL
    if (!(out << MetricsJson(f, metrics, num_requests).dump() << "\n")) {
      return Fail("bench-serving", f.output_file + ": cannot write");
    }
  }
  return metrics.completed == num_requests ? 0 : 1;
}

}  // namespace mlaserve::cli
