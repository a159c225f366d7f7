#include "batch/engine_generator.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "batch/hidden_dump.h"

namespace mlaserve::batch {
namespace {

// What the engine thread hands the waiting worker. Shared, because the engine's callback may
// still hold it while the worker returns. `ids` is reserved for the whole generation up front,
// so appending a token never allocates.
struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenId> ids;  // all tokens so far
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  CapturedRows captured;  // with TurnRequest::captured, reserved for the whole sequence
};

}  // namespace

TurnOutcome EngineGenerator::Generate(const TurnRequest& request, OnTokens on_tokens) {
  GenerateRequest req;
  req.rid = request.rid;
  req.input_ids = request.input_ids;
  req.sampling.temperature = float(request.temperature);
  req.sampling.top_p = float(request.top_p);
  req.sampling.max_new_tokens = request.max_new_tokens;
  req.sampling.seed = request.seed;
  req.capture_hidden_states = request.captured != nullptr;
  TurnOutcome out;
  out.serving = serving_;
  auto box = std::make_shared<Mailbox>();
  box->ids.reserve(size_t(std::max(0, request.max_new_tokens)));
  out.new_ids.reserve(box->ids.capacity());
  if (request.captured != nullptr) {
    box->captured.Reset(engine_.captured_width(), int(request.input_ids.size()) + request.max_new_tokens);
  }
  const Status submitted = engine_.Submit(std::move(req), [box](const OutputView& o) {
    std::lock_guard<std::mutex> lock(box->mu);
    box->captured.Add(o.captured_first_position, o.captured_rows);
    box->ids.insert(box->ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    if (o.finished) {
      box->finished = true;
      box->reason = o.finish_reason;
      box->error.assign(o.error);
    }
    box->cv.notify_one();
  });
  if (!submitted.ok()) {
    out.error = TurnError::kPermanent;
    out.message = submitted.message();
    return out;
  }
  // out.new_ids follows box->ids by appending what arrived since (under the lock): copying the
  // whole answer on every token would make a turn quadratic and hold the engine's callback.
  const auto catch_up = [&] {
    out.new_ids.insert(out.new_ids.end(), box->ids.begin() + std::ptrdiff_t(out.new_ids.size()), box->ids.end());
  };
  std::unique_lock<std::mutex> lock(box->mu);
  for (;;) {
    const bool woken = box->cv.wait_for(lock, std::chrono::milliseconds(50), [&] {
      return box->finished || box->ids.size() > out.new_ids.size();
    });
    if (!woken && request.cancel != nullptr && request.cancel->load()) {
      // The run is stopping: keep what came so far (the runner checkpoints it) and let it go.
      engine_.Abort(request.rid);
      catch_up();
      out.error = TurnError::kInterrupted;
      out.message = "stopped";
      return out;
    }
    if (box->ids.size() > out.new_ids.size()) {
      catch_up();
      lock.unlock();
      on_tokens(out.new_ids, serving_);
      lock.lock();
    }
    if (box->finished && out.new_ids.size() == box->ids.size()) break;
  }
  if (box->reason == FinishReason::kAbort) {
    out.error = TurnError::kPermanent;
    out.message = "engine aborted the request: " + box->error;
  } else {
    out.finish_reason = FinishReasonName(box->reason);
    if (request.captured != nullptr) *request.captured = std::move(box->captured);  // finished: the engine is done with it
  }
  return out;
}

}  // namespace mlaserve::batch
