// bench-serving's prompts, all from the seed: SGLang's random dataset (lengths uniform in
// [len * range_ratio, len], token ids when the vocabulary is known, else common words), a JSONL
// file of prompts, ShareGPT conversations, and the Poisson arrival times.
#include <algorithm>
#include <cmath>

#include "cli/bench_serving/bench_serving.h"
#include "core/read_file.h"
#include "engine/sampler.h"

namespace mlaserve::cli::bench_serving {
namespace {

using json = nlohmann::json;

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

}  // namespace

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

Result<std::vector<BenchRequest>> ShareGptDataset(const ServingFlags& f, const Tokenizer& tokenizer) {
  // Parsed whole (a JSON array): ShareGPT_V3's ~650 MB fits; a file past 2 GiB is refused before
  // its JSON tree (several times its size) is built.
  auto file = ReadTextFile(f.dataset_path, size_t(2) << 30);
  if (!file.ok()) return file.status();
  const json all = json::parse(*file, nullptr, false);
  if (all.is_discarded() || !all.is_array()) {
    return Status::Error(f.dataset_path + ": not a JSON array (want ShareGPT: [{\"conversations\": [...]}, ...])");
  }
  // (prompt, completion) of every conversation with two turns or more.
  std::vector<std::pair<const std::string*, const std::string*>> pairs;
  for (const json& record : all) {
    if (!record.is_object()) continue;
    const auto list = record.contains("conversations") ? record.find("conversations") : record.find("conversation");
    if (list == record.end() || !list->is_array() || list->size() < 2) continue;
    const json &first = (*list)[0], &second = (*list)[1];
    if (!first.is_object() || !second.is_object() || !first.contains("value") || !second.contains("value") ||
        !first["value"].is_string() || !second["value"].is_string()) {
      continue;
    }
    pairs.emplace_back(first["value"].get_ptr<const std::string*>(), second["value"].get_ptr<const std::string*>());
  }
  // Fisher-Yates from the seed.
  for (size_t i = pairs.size(); i > 1; --i) {
    const size_t j = std::min(i - 1, size_t(CounterUniform(f.seed ^ 0x5bd1e995ULL, uint64_t(i)) * double(i)));
    std::swap(pairs[i - 1], pairs[j]);
  }
  std::vector<BenchRequest> out;
  for (const auto& [prompt, completion] : pairs) {
    if (int(out.size()) >= f.num_prompts) break;
    auto prompt_ids = tokenizer.Encode(*prompt, /*add_bos=*/true);
    if (!prompt_ids.ok()) return prompt_ids.status();
    int output_len = f.sharegpt_output_len;
    if (output_len == 0) {
      auto completion_ids = tokenizer.Encode(*completion, /*add_bos=*/false);
      if (!completion_ids.ok()) return completion_ids.status();
      output_len = int(completion_ids->size());
    }
    const int prompt_len = int(prompt_ids->size());
    if (prompt_len < 2 || output_len < 2) continue;
    if (f.sharegpt_context_len > 0 && prompt_len + output_len > f.sharegpt_context_len) continue;
    BenchRequest r{.text = *prompt, .prompt_len_estimate = prompt_len, .output_len = output_len};
    r.input_ids.assign(prompt_ids->begin(), prompt_ids->end());
    out.push_back(std::move(r));
  }
  if (out.empty()) return Status::Error(f.dataset_path + ": no ShareGPT conversation with two turns fits");
  return out;
}

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

}  // namespace mlaserve::cli::bench_serving
