#include "batch/batch_runner.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

namespace mlaserve::batch {
namespace {

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string JoinFormats(const std::vector<std::string>& formats) {
  std::string out;
  for (const std::string& f : formats) out += (out.empty() ? "" : "+") + f;
  return out.empty() ? "unknown" : out;
}

void NoteFormat(RecordProgress& p, const std::string& format) {
  if (p.kv_formats.empty() || p.kv_formats.back() != format) p.kv_formats.push_back(format);
}

}  // namespace

uint64_t RecordSeed(uint64_t seed, const std::string& id) {
  // 53 bits: exact in every JSON parser, including JavaScript's doubles.
  return Fnv1a64(id, 0xcbf29ce484222325ULL ^ (seed * 0x9e3779b97f4a7c15ULL)) & ((uint64_t(1) << 53) - 1);
}

BatchRunner::BatchRunner(const std::vector<Record>& records, std::vector<RecordProgress>& progress,
                         TurnGenerator& generator, ProgressDb& db, OutputWriter& writer, const Tokenizer& tokenizer,
                         const ChatTemplate& chat_template, RunnerOptions options, RunnerStats& stats, RunGate& gate)
    : records_(records),
      progress_(progress),
      generator_(generator),
      db_(db),
      writer_(writer),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      options_(std::move(options)),
      stats_(stats),
      gate_(gate),
      run_nonce_(Hex64(Fnv1a64(std::to_string(::getpid()) + "/" +
                               std::to_string(std::chrono::system_clock::now().time_since_epoch().count())))
                     .substr(0, 8)) {}

Result<std::vector<TokenId>> BatchRunner::PromptIds(const Record& record, const std::vector<Answer>& answers,
                                                    size_t turn, std::vector<ChatMessage>* messages) const {
  const size_t slot = size_t(record.answer_slots[turn]);
  messages->assign(record.messages.begin(), record.messages.begin() + std::ptrdiff_t(slot));
  for (size_t k = 0; k < turn; ++k) {
    (*messages)[size_t(record.answer_slots[k])].content =
        tokenizer_.Decode(answers[k].ids, /*skip_special_tokens=*/true);
  }
  auto text = chat_template_.Render(*messages, /*add_generation_prompt=*/true);
  if (!text.ok()) return text.status();
  return tokenizer_.Encode(*text, /*add_bos=*/false);
}

Result<Answer> BatchRunner::RunTurn(const Record& record, RecordProgress& p, size_t turn) {
  std::vector<ChatMessage> messages;
  auto prompt = PromptIds(record, p.turns, turn, &messages);
  if (!prompt.ok()) return prompt.status();
  int failures = 0;  // timeouts, 5xx, and interruptions that produced nothing, while a server answered
  for (int attempt = 0;; ++attempt) {
    if (!p.partial.empty() && !generator_.continues_partial()) {
      p.partial.clear();  // a chat-only endpoint cannot take the partial answer: start over
      ++p.restarted;
      ++stats_.restarted;
      MLA_RETURN_IF_ERROR(db_.SaveProgress(p));
    }
    // A checkpoint can hold the stop token of a turn that finished just before a kill: that
    // turn is done (continuing would write past it).
    if (!p.partial.empty() && tokenizer_.eos_id() && p.partial.back() == *tokenizer_.eos_id()) {
      return Answer{.ids = p.partial, .finish_reason = "stop", .prompt_tokens = int(prompt->size())};
    }
    const int remaining = options_.max_new_tokens - int(p.partial.size());
    if (remaining <= 0) return Answer{.ids = p.partial, .finish_reason = "length", .prompt_tokens = int(prompt->size())};
    TurnRequest request{.rid = record.id + "#" + std::to_string(turn) + "." + std::to_string(attempt) + "." + run_nonce_,
                        .input_ids = *prompt,
                        .messages = messages,
                        .max_new_tokens = remaining,
                        .temperature = options_.temperature,
                        .top_p = options_.top_p,
                        .seed = RecordSeed(options_.seed, record.id),
                        .cancel = &gate_.stop_flag()};
    request.input_ids.insert(request.input_ids.end(), p.partial.begin(), p.partial.end());
    const std::vector<TokenId> base = p.partial;
    Clock::time_point last_checkpoint = Clock::now();
    size_t reported = 0;
    Status checkpoint_error;
    TurnOutcome outcome = generator_.Generate(request, [&](std::span<const TokenId> ids) {
      stats_.new_tokens += int64_t(ids.size()) - int64_t(reported);
      reported = ids.size();
      if (SecondsSince(last_checkpoint) < options_.checkpoint_interval_s || !checkpoint_error.ok()) return;
      p.partial = base;
      p.partial.insert(p.partial.end(), ids.begin(), ids.end());
      checkpoint_error = db_.SaveProgress(p);
      last_checkpoint = Clock::now();
    });
    MLA_RETURN_IF_ERROR(checkpoint_error);
    p.partial = base;
    p.partial.insert(p.partial.end(), outcome.new_ids.begin(), outcome.new_ids.end());
    if (!outcome.new_ids.empty() || outcome.error == TurnError::kNone) NoteFormat(p, outcome.kv_format);
    if (outcome.error == TurnError::kNone) {
      return Answer{.ids = p.partial, .finish_reason = outcome.finish_reason, .prompt_tokens = int(prompt->size())};
    }
    MLA_RETURN_IF_ERROR(db_.SaveProgress(p));
    MLA_RETURN_IF_ERROR(Recover(outcome, p, failures));
  }
}

Status BatchRunner::Recover(const TurnOutcome& outcome, RecordProgress& p, int& failures) {
  if (gate_.stopping()) return Status::Error("the run is stopping");
  if (outcome.error == TurnError::kPermanent) return Status::Error(outcome.message);
  if (outcome.error == TurnError::kInterrupted) ++stats_.interruptions;
  // An outage is nobody's fault: wait it out (the whole run waits) and try again uncounted.
  const RunGate::Wait wait = gate_.AwaitServer();
  if (wait == RunGate::Wait::kStopped) return Status::Error("the run is stopping");
  if (wait == RunGate::Wait::kWasUp) {
    // A server answered at once: what went wrong was this record's.
    if (outcome.error == TurnError::kRetryable) {
      if (++failures > options_.max_retries) {
        return Status::Error(outcome.message + " (after " + std::to_string(options_.max_retries) + " retries)");
      }
      const double backoff_s = std::min(10.0, 0.5 * double(1 << std::min(failures, 5)));
      if (!gate_.Sleep(backoff_s)) return Status::Error("the run is stopping");
    } else if (outcome.new_ids.empty() && ++failures > 2 * options_.max_retries + 5) {
      return Status::Error(outcome.message + " (" + std::to_string(failures) + " interruptions without progress)");
    }
  }
  if (outcome.error == TurnError::kInterrupted && !p.partial.empty() && generator_.continues_partial()) {
    ++p.continued;
    ++stats_.continued;
  }
  return Status::Ok();
}

Status BatchRunner::RunRecord(size_t index) {
  const Record& record = records_[index];
  RecordProgress& p = progress_[index];
  if (p.state == RecordState::kRunning && (!p.partial.empty() || !p.turns.empty())) ++stats_.resumed_from_checkpoint;
  ++stats_.running;
  std::string error;
  while (p.turns.size() < record.answer_slots.size()) {
    auto answer = RunTurn(record, p, p.turns.size());
    if (!answer.ok() && gate_.stopping()) {
      --stats_.running;  // stopped: the checkpoint stands and the record stays running for the next run
      return Status::Ok();
    }
    if (!answer.ok()) {
      error = answer.error();
      break;
    }
    p.turns.push_back(std::move(answer).value());
    p.partial.clear();
    if (p.turns.size() < record.answer_slots.size()) {
      if (Status s = db_.SaveProgress(p); !s.ok()) {
        --stats_.running;
        return s;
      }
    }
  }
  --stats_.running;
  if (!error.empty()) {
    p.state = RecordState::kFailed;
    p.error = error;
    MLA_RETURN_IF_ERROR(db_.MarkFailed(p.id, error));
    ++stats_.failed;
    ++stats_.failed_this_run;
    return writer_.Offer(index, std::nullopt);
  }
  for (Answer& a : p.turns) a.text = tokenizer_.Decode(a.ids, /*skip_special_tokens=*/true);
  OutputSettings settings = options_.output;
  settings.kv_cache_dtype = JoinFormats(p.kv_formats);
  p.output_line = RenderOutputLine(record, p.turns, settings);
  MLA_RETURN_IF_ERROR(db_.MarkDone(p));  // the commit point
  p.state = RecordState::kDone;
  ++stats_.done;
  ++stats_.done_this_run;
  return writer_.Offer(index, p.output_line);
}

Status BatchRunner::Run() {
  stats_.total = int(records_.size());
  for (size_t i = 0; i < records_.size(); ++i) {
    RecordProgress& p = progress_[i];
    if (auto it = writer_.existing().find(p.id); it != writer_.existing().end() && p.state != RecordState::kDone) {
      // The output holds a line the DB does not (an OS crash lost the DB's last commits): the
      // line is the record's result; adopt it rather than generate it twice.
      p.output_line = it->second;
      MLA_RETURN_IF_ERROR(db_.MarkDone(p));
      p.state = RecordState::kDone;
    }
    if (p.state == RecordState::kDone) {
      ++stats_.done;
      MLA_RETURN_IF_ERROR(writer_.Offer(i, p.output_line));
    } else if (p.state == RecordState::kFailed) {
      ++stats_.failed;
      MLA_RETURN_IF_ERROR(writer_.Offer(i, std::nullopt));
    } else {
      todo_.push_back(i);
    }
  }
  std::mutex error_mu;
  Status first_error;
  auto worker = [&] {
    while (!gate_.stopping()) {
      const size_t k = next_.fetch_add(1);
      if (k >= todo_.size()) return;
      if (Status s = RunRecord(todo_[k]); !s.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (first_error.ok()) first_error = s;
        gate_.RequestStop();
      }
    }
  };
  std::vector<std::thread> workers;
  const size_t num_workers = std::min(todo_.size(), size_t(std::max(1, options_.concurrency)));
  for (size_t w = 0; w < num_workers; ++w) workers.emplace_back(worker);
  for (std::thread& t : workers) t.join();
  return first_error;
}

}  // namespace mlaserve::batch
