#include "sim/batch_workload.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "batch/input_file.h"
#include "batch/records.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

struct TurnLengths {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// id -> the turns' lengths, from a batch output file (lines without an id or turns are skipped:
// the file is a run's product, not the user's input).
Result<std::unordered_map<std::string, std::vector<TurnLengths>>> ReadLengths(const std::string& path) {
  std::unordered_map<std::string, std::vector<TurnLengths>> out;
  const Status read = batch::ForEachLine(path, [&](int line_no, int64_t, std::string_view line) -> Status {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return Status::Ok();
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return Status::Error(path + ":" + std::to_string(line_no) + ": not a JSON object (want batch's output lines)");
    }
    if (!j.contains("id") || !j["id"].is_string() || !j.contains("turns") || !j["turns"].is_array()) {
      return Status::Ok();
    }
    std::vector<TurnLengths> turns;
    for (const json& t : j["turns"]) {
      if (!t.is_object() || !t.contains("prompt_tokens") || !t.contains("completion_tokens") ||
          !t["prompt_tokens"].is_number_integer() || !t["completion_tokens"].is_number_integer()) {
        return Status::Error(path + ":" + std::to_string(line_no) +
                             ": a turn without integer prompt_tokens and completion_tokens");
      }
      turns.push_back({t["prompt_tokens"].get<int64_t>(), t["completion_tokens"].get<int64_t>()});
    }
    out[j["id"].get<std::string>()] = std::move(turns);
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return out;
}

std::vector<TokenId> Fold(std::span<const TokenId> ids, int vocab_size) {
  std::vector<TokenId> out(ids.begin(), ids.end());
  for (TokenId& id : out) id = TokenId(int64_t(id) % vocab_size);
  return out;
}

}  // namespace

Result<BatchWorkload> ReadBatchWorkload(const BatchWorkloadOptions& options, const Tokenizer& tokenizer,
                                        const ChatTemplate& chat_template) {
  if (options.vocab_size <= 0 || options.max_new_tokens <= 0) return Status::Error("bad batch workload options");
  std::unordered_map<std::string, std::vector<TurnLengths>> lengths;
  if (!options.lengths_from_path.empty()) {
    auto read = ReadLengths(options.lengths_from_path);
    if (!read.ok()) return read.status();
    lengths = std::move(read).value();
  }
  BatchWorkload out;
  batch::DuplicateIds seen;
  const Status read = batch::ForEachLine(options.input_path, [&](int line_no, int64_t, std::string_view line) -> Status {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return Status::Ok();
    auto record = batch::ParseRecordLine(line, line_no);
    std::string problem = record.ok() ? "" : record.error();
    if (record.ok()) {
      if (auto dup = seen.Check(record->id, line_no)) problem = dup->reason;
    }
    if (!problem.empty()) {
      if (out.skipped_lines++ == 0) out.first_skipped = "line " + std::to_string(line_no) + ": " + problem;
      return Status::Ok();
    }
    const auto known = lengths.find(record->id);
    const std::vector<TurnLengths>* measured =
        known != lengths.end() && known->second.size() == record->answer_slots.size() ? &known->second : nullptr;
    ++out.records;
    int64_t earlier_prompt = 0, earlier_answer = 0;  // the earlier turn's, as rendered / measured
    int earlier_index = -1;
    for (size_t k = 0; k < record->answer_slots.size(); ++k) {
      const size_t slot = size_t(record->answer_slots[k]);
      const std::span<const ChatMessage> before(record->messages.data(), slot);
      auto text = chat_template.Render(before, /*add_generation_prompt=*/true);
      if (!text.ok()) return Status::Error(options.input_path + ":" + std::to_string(line_no) + ": " + text.error());
      auto ids = tokenizer.Encode(*text, /*add_bos=*/false);
      if (!ids.ok()) return Status::Error(options.input_path + ":" + std::to_string(line_no) + ": " + ids.error());
      int64_t prompt_len = int64_t(ids->size()), answer_len = options.max_new_tokens;
      if (slot < record->messages.size()) {
        auto original = tokenizer.Encode(record->messages[slot].content, /*add_bos=*/false);
        if (!original.ok()) return original.status();
        answer_len = std::clamp<int64_t>(int64_t(original->size()), 1, options.max_new_tokens);
      }
      if (measured != nullptr) {
        prompt_len = (*measured)[k].prompt_tokens;
        answer_len = std::max<int64_t>(1, (*measured)[k].completion_tokens);
        ++out.turns_with_lengths;
      }
      TimedRequest request{.output_len = int(answer_len), .arrival_s = 0, .follows = earlier_index};
      if (earlier_index < 0) {
        request.prompt = Fold(*ids, options.vocab_size);
      } else {
        // The template's tokens after the earlier answer: the next user turn and the generation prompt.
        const int64_t added = std::clamp<int64_t>(prompt_len - earlier_prompt - earlier_answer, 1, int64_t(ids->size()));
        request.prompt = Fold(std::span<const TokenId>(*ids).last(size_t(added)), options.vocab_size);
      }
      earlier_prompt = prompt_len;
      earlier_answer = answer_len;
      earlier_index = int(out.requests.size());
      out.requests.push_back(std::move(request));
    }
    return Status::Ok();
  });
  if (!read.ok()) return read;
  if (out.requests.empty()) return Status::Error(options.input_path + ": no records to simulate");
  return out;
}

}  // namespace mlaserve
