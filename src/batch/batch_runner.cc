#include "batch/batch_runner.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>

namespace mlaserve::batch {
namespace {

// All segments of a record's answers, in order.
std::vector<Segment> AllSegments(const std::vector<Answer>& answers) {
  std::vector<Segment> all;
  for (const Answer& a : answers) all.insert(all.end(), a.segments.begin(), a.segments.end());
  return all;
}

}  // namespace

uint64_t RecordSeed(uint64_t seed, const std::string& id) {
  // 53 bits: exact in every JSON parser, including JavaScript's doubles.
  return Fnv1a64(id, 0xcbf29ce484222325ULL ^ (seed * 0x9e3779b97f4a7c15ULL)) & ((uint64_t(1) << 53) - 1);
}

BatchRunner::BatchRunner(const InputFile& input, WorkQueue& queue, TurnGenerator& generator, ProgressDb& db,
                         OutputWriter& writer, const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                         RunnerOptions options, RunnerStats& stats, RunGate& gate)
    : input_(input),
      queue_(queue),
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

Result<Answer> BatchRunner::RunTurn(const Record& record, RecordProgress& p, size_t turn, CapturedRows* captured) {
  std::vector<ChatMessage> messages;
  auto prompt = PromptIds(record, p.turns, turn, &messages);
  if (!prompt.ok()) return prompt.status();
  int failures = 0;  // timeouts, 5xx, and interruptions that produced nothing, while a server answered
  for (int attempt = 0;; ++attempt) {
    if (!p.partial.empty() && !generator_.continues_partial()) {
      p.partial.clear();  // a chat-only endpoint cannot take the partial answer: start over
      p.partial_segments.clear();
      ++p.restarted;
      ++stats_.restarted;
      MLA_RETURN_IF_ERROR(db_.SaveProgress(p));
    }
    // A checkpoint can hold the stop token of a turn that finished just before a kill: that
    // turn is done (continuing would write past it).
    if (!p.partial.empty() && tokenizer_.eos_id() && p.partial.back() == *tokenizer_.eos_id()) {
      return Answer{.ids = p.partial, .segments = p.partial_segments, .finish_reason = "stop",
                    .prompt_tokens = int(prompt->size())};
    }
    const int remaining = options_.max_new_tokens - int(p.partial.size());
    if (remaining <= 0) {
      return Answer{.ids = p.partial, .segments = p.partial_segments, .finish_reason = "length",
                    .prompt_tokens = int(prompt->size())};
    }
    TurnRequest request{.rid = record.id + "#" + std::to_string(turn) + "." + std::to_string(attempt) + "." + run_nonce_,
                        .input_ids = *prompt,
                        .messages = messages,
                        .max_new_tokens = remaining,
                        .temperature = options_.temperature,
                        .top_p = options_.top_p,
                        .seed = RecordSeed(options_.seed, record.id),
                        .cancel = &gate_.stop_flag(),
                        .captured = captured};
    request.input_ids.insert(request.input_ids.end(), p.partial.begin(), p.partial.end());
    const std::vector<TokenId> base = p.partial;
    const std::vector<Segment> base_segments = p.partial_segments;
    // The partial answer and who generated each of its tokens, always together.
    auto set_partial = [&](std::span<const TokenId> ids, const Serving& serving) {
      p.partial = base;
      p.partial.insert(p.partial.end(), ids.begin(), ids.end());
      p.partial_segments = base_segments;
      AppendSegment(p.partial_segments, serving, int(ids.size()));
    };
    Clock::time_point last_checkpoint = Clock::now();
    size_t reported = 0;
    Status checkpoint_error;
    TurnOutcome outcome = generator_.Generate(request, [&](std::span<const TokenId> ids, const Serving& serving) {
      stats_.new_tokens += int64_t(ids.size()) - int64_t(reported);
      reported = ids.size();
      if (SecondsSince(last_checkpoint) < options_.checkpoint_interval_s || !checkpoint_error.ok()) return;
      set_partial(ids, serving);
      checkpoint_error = db_.SaveProgress(p);
      last_checkpoint = Clock::now();
    });
    MLA_RETURN_IF_ERROR(checkpoint_error);
    set_partial(outcome.new_ids, outcome.serving);
    if (outcome.error == TurnError::kNone) {
      return Answer{.ids = p.partial, .segments = p.partial_segments, .finish_reason = outcome.finish_reason,
                    .prompt_tokens = int(prompt->size())};
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

Result<HiddenDumpFile> BatchRunner::DumpHiddenStates(const Record& record, const RecordProgress& p,
                                                     CapturedRows& captured) {
  const size_t last = p.turns.size() - 1;
  std::vector<ChatMessage> messages;
  auto ids = PromptIds(record, p.turns, last, &messages);
  if (!ids.ok()) return ids.status();
  ids->insert(ids->end(), p.turns[last].ids.begin(), p.turns[last].ids.end());
  const int n = int(ids->size());
  if (!captured.Covers(n - 1)) {
    TurnRequest request{.rid = record.id + "#hidden." + run_nonce_,
                        .input_ids = std::vector<TokenId>(ids->begin(), ids->end() - 1),
                        .messages = messages,
                        .max_new_tokens = 0,
                        .cancel = &gate_.stop_flag(),
                        .captured = &captured};
    const TurnOutcome outcome = generator_.Generate(request, [](std::span<const TokenId>, const Serving&) {});
    if (outcome.error != TurnError::kNone) return Status::Error("hidden states: " + outcome.message);
  }
  return options_.dump->Write(p.seq, record.id, *ids, captured);
}

Status BatchRunner::RunRecord(RecordProgress& p) {
  auto read = input_.Read(p);
  if (!read.ok()) return read.status();
  const Record& record = *read;
  if (p.state == RecordState::kRunning && (!p.partial.empty() || !p.turns.empty())) ++stats_.resumed_from_checkpoint;
  ++stats_.running;
  std::string error;
  CapturedRows captured;  // the final turn's hidden states (--dump-hidden-states)
  while (p.turns.size() < record.answer_slots.size()) {
    const bool final_turn = p.turns.size() + 1 == record.answer_slots.size();
    auto answer = RunTurn(record, p, p.turns.size(), options_.dump != nullptr && final_turn ? &captured : nullptr);
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
    p.partial_segments.clear();
    if (p.turns.size() < record.answer_slots.size()) {
      if (Status s = db_.SaveProgress(p); !s.ok()) {
        --stats_.running;
        return s;
      }
    }
  }
  std::optional<HiddenDumpFile> dumped;
  if (error.empty() && options_.dump != nullptr) {
    auto file = DumpHiddenStates(record, p, captured);
    if (!file.ok() && gate_.stopping()) {
      --stats_.running;  // as above: the record stays running
      return Status::Ok();
    }
    if (file.ok()) dumped = std::move(file).value();
    else error = file.error();
  }
  --stats_.running;
  if (!error.empty()) {
    p.state = RecordState::kFailed;
    p.error = error;
    MLA_RETURN_IF_ERROR(db_.MarkFailed(p));
    ++stats_.failed;
    ++stats_.failed_this_run;
    return writer_.Offer(p.seq, std::nullopt);
  }
  for (Answer& a : p.turns) a.text = tokenizer_.Decode(a.ids, /*skip_special_tokens=*/true);
  OutputSettings settings = options_.output;
  settings.kv_cache_dtype = KvSummary(AllSegments(p.turns));
  p.output_line = RenderOutputLine(record, p.turns, settings);
  // The commit point (the hidden-state file, renamed into place above, is recorded with it).
  MLA_RETURN_IF_ERROR(db_.MarkDone(p, dumped ? &*dumped : nullptr));
  p.state = RecordState::kDone;
  stats_.provenance.Add(AllSegments(p.turns));
  ++stats_.done;
  ++stats_.done_this_run;
  return writer_.Offer(p.seq, std::move(p.output_line));
}

Status BatchRunner::Run() {
  std::mutex error_mu;
  Status first_error;
  auto fail = [&](Status s) {
    std::lock_guard<std::mutex> lock(error_mu);
    if (first_error.ok()) first_error = std::move(s);
    gate_.RequestStop();
  };
  auto worker = [&] {
    while (!gate_.stopping()) {
      auto next = queue_.Next();
      if (!next.ok()) return fail(next.status());
      if (!*next) return;
      if (Status s = RunRecord(**next); !s.ok()) return fail(std::move(s));
    }
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < std::max(1, options_.concurrency); ++w) workers.emplace_back(worker);
  for (std::thread& t : workers) t.join();
  return first_error;
}

}  // namespace mlaserve::batch
