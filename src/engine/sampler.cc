#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace mlaserve {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

}  // namespace

double CounterUniform(uint64_t seed, uint64_t position) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + position + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * (1.0 / 9007199254740992.0);
}

TokenId ArgMax(std::span<const float> logits) {
  return TokenId(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// ---- PenaltyState ----

PenaltyState::PenaltyState(int expected_output_tokens) {
  const size_t expected = size_t(std::max(expected_output_tokens, 8));
  entries_.reserve(expected);
  Rehash(std::bit_ceil(expected * 2));
}

size_t PenaltyState::SlotOf(TokenId token) const {
  const size_t mask = slots_.size() - 1;
  size_t slot = size_t((uint64_t(uint32_t(token)) * 0x9E3779B97F4A7C15ull) >> 40) & mask;  // Fibonacci hash
  while (slots_[slot] >= 0 && entries_[size_t(slots_[slot])].token != token) slot = (slot + 1) & mask;
  return slot;
}

void PenaltyState::Rehash(size_t num_slots) {
  slots_.assign(num_slots, -1);
  for (size_t i = 0; i < entries_.size(); ++i) slots_[SlotOf(entries_[i].token)] = int32_t(i);
}

void PenaltyState::Add(TokenId token) {
  MLA_CHECK(token >= 0);
  ++num_output_tokens_;
  const size_t slot = SlotOf(token);
  if (slots_[slot] >= 0) {
    ++entries_[size_t(slots_[slot])].count;
    return;
  }
  slots_[slot] = int32_t(entries_.size());
  entries_.push_back({token, 1});
  if (entries_.size() * 2 > slots_.size()) Rehash(slots_.size() * 2);
}

int32_t PenaltyState::CountOf(TokenId token) const {
  if (token < 0) return 0;
  const int32_t index = slots_[SlotOf(token)];
  return index >= 0 ? entries_[size_t(index)].count : 0;
}

// ---- Sampler ----

Sampler::Sampler(int vocab_size)
    : adjusted_(size_t(vocab_size)), probs_(size_t(vocab_size)), order_(size_t(vocab_size)) {}

TokenId Sampler::Sample(std::span<const float> logits, const SamplingParams& params, int64_t position) {
  return Sample(logits, params, SampleContext{.position = position, .seed = params.seed.value_or(0)});
}

std::span<const float> Sampler::Adjust(std::span<const float> logits, const SamplingParams& p,
                                       const SampleContext& context) {
  const size_t vocab = logits.size();
  const PenaltyState* history = context.output_history;
  const bool penalise = history != nullptr && !history->entries().empty() &&
                        (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f ||
                         p.repetition_penalty != 1.0f);
  const int64_t num_generated = history != nullptr ? history->num_output_tokens() : 0;
  const bool mask_stops = num_generated < p.min_new_tokens &&
                          (!p.stop_token_ids.empty() || !context.eos_token_ids.empty());
  if (!penalise && !mask_stops && p.logit_bias.empty()) return logits;

  std::copy(logits.begin(), logits.end(), adjusted_.begin());
  for (const LogitBias& b : p.logit_bias) {
    if (b.token >= 0 && size_t(b.token) < vocab) adjusted_[size_t(b.token)] += b.bias;
  }
  if (penalise) {
    // Additive penalties first, then the scaling one, as SGLang applies them; per token the
    // order within each kind does not matter.
    for (const PenaltyState::Entry& e : history->entries()) {
      if (size_t(e.token) >= vocab) continue;  // not a token of this vocabulary
      float v = adjusted_[size_t(e.token)];
      v -= p.frequency_penalty * float(e.count) + p.presence_penalty;
      if (p.repetition_penalty != 1.0f) v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
      adjusted_[size_t(e.token)] = v;
    }
  }
  if (mask_stops) {
    for (std::span<const TokenId> ids : {std::span<const TokenId>(p.stop_token_ids), context.eos_token_ids}) {
      for (TokenId id : ids) {
        if (id >= 0 && size_t(id) < vocab) adjusted_[size_t(id)] = kMinusInf;
      }
    }
  }
  return std::span<const float>(adjusted_.data(), vocab);
}

TokenId Sampler::Sample(std::span<const float> logits, const SamplingParams& p, const SampleContext& context,
                        LogprobResult* logprob) {
  MLA_CHECK(!logits.empty() && logits.size() <= adjusted_.size());
  const std::span<const float> z = Adjust(logits, p, context);
  const TokenId max_id = ArgMax(z);
  if (!(z[size_t(max_id)] > kMinusInf)) {  // everything masked (or NaN): the model's own choice
    const TokenId fallback = ArgMax(logits);
    if (logprob != nullptr) ComputeLogprobs(logits, 1.0f, fallback, p.top_logprobs_num, *logprob);
    return fallback;
  }
  const bool greedy = IsGreedy(p);
  const TokenId chosen = greedy ? max_id : Draw(z, z[size_t(max_id)], p, context);
  if (logprob != nullptr) ComputeLogprobs(z, greedy ? 1.0f : p.temperature, chosen, p.top_logprobs_num, *logprob);
  return chosen;
}

TokenId Sampler::Draw(std::span<const float> z, float max_logit, const SamplingParams& p,
                      const SampleContext& context) {
  const size_t vocab = z.size();
  const float inv_t = 1.0f / p.temperature;
  // probs_ (by token id) relative to the most likely token (which gets 1), so min_p's threshold
  // is min_p. -inf (masked) logits give exactly 0.
  auto prob = [&](size_t id) { return std::exp((z[id] - max_logit) * inv_t); };

  // Candidates: all tokens in id order, or the most likely first when top_k or top_p needs it.
  // Ordering by logit (ties by id) is the order by probability, and deterministic.
  auto by_logit = [&](int32_t a, int32_t b) {
    return z[size_t(a)] > z[size_t(b)] || (z[size_t(a)] == z[size_t(b)] && a < b);
  };
  const auto first = order_.begin();
  size_t num_candidates = vocab;
  if (p.top_k > 1 && size_t(p.top_k) < vocab) {
    // The top_k most likely in one pass over the logits: a heap of the best so far, whose top is
    // the worst of them. by_logit is a strict total order, so this is the same list, in the same
    // order, as a sort of the whole vocabulary; only the candidates' probabilities are computed.
    num_candidates = size_t(p.top_k);
    const auto last = first + ptrdiff_t(num_candidates);
    std::iota(first, last, 0);
    std::make_heap(first, last, by_logit);
    for (int32_t id = int32_t(num_candidates); id < int32_t(vocab); ++id) {
      if (!by_logit(id, *first)) continue;
      std::pop_heap(first, last, by_logit);
      *(last - 1) = id;
      std::push_heap(first, last, by_logit);
    }
    std::sort_heap(first, last, by_logit);
    for (size_t i = 0; i < num_candidates; ++i) probs_[size_t(order_[i])] = prob(size_t(order_[i]));
  } else {
    for (size_t i = 0; i < vocab; ++i) probs_[i] = prob(i);
    std::iota(first, first + ptrdiff_t(vocab), 0);
  }
  if (p.top_p < 1.0f) {
    // The smallest most-likely prefix holding at least top_p of the candidates' mass. Without
    // top_k the candidates are unsorted: sort only as far as the prefix reaches, in growing
    // blocks (select with nth_element, then sort the block), as a nucleus is usually short.
    const bool sorted = num_candidates < vocab;
    if (!sorted) {
      num_candidates = size_t(std::partition(first, first + ptrdiff_t(vocab),
                                             [&](int32_t id) { return probs_[size_t(id)] > 0.0f; }) -
                              first);
    }
    double mass = 0.0;
    for (size_t i = 0; i < num_candidates; ++i) mass += probs_[size_t(order_[i])];
    const double target = double(p.top_p) * mass;
    double cumulative = 0.0;
    size_t done = 0;  // order_[0, done) is sorted and summed
    size_t block_end = std::min(num_candidates, size_t(256));
    while (true) {
      if (!sorted) {
        const auto block_first = first + ptrdiff_t(done), block_last = first + ptrdiff_t(block_end);
        std::nth_element(block_first, block_last - 1, first + ptrdiff_t(num_candidates), by_logit);
        std::sort(block_first, block_last, by_logit);
      }
      bool reached = false;
      for (; done < block_end && !reached; ++done) {
        cumulative += probs_[size_t(order_[done])];
        reached = cumulative >= target;
      }
      if (reached || done == num_candidates) break;  // (the latter only through rounding)
      block_end = std::min(num_candidates, block_end * 4);
    }
    num_candidates = done;
  }

  // min_p and the draw: one pass to weigh the survivors, one to find u's token.
  const float min_prob = p.min_p;
  auto kept = [&](int32_t id) { return probs_[size_t(id)] > 0.0f && probs_[size_t(id)] >= min_prob; };
  double total = 0.0;
  for (size_t i = 0; i < num_candidates; ++i) {
    if (kept(order_[i])) total += probs_[size_t(order_[i])];
  }
  const double u = CounterUniform(context.seed, uint64_t(context.position)) * total;
  double cumulative = 0.0;
  int32_t last_kept = order_[0];
  for (size_t i = 0; i < num_candidates; ++i) {
    const int32_t id = order_[i];
    if (!kept(id)) continue;
    cumulative += probs_[size_t(id)];
    last_kept = id;
    if (u < cumulative) return id;
  }
  return last_kept;  // u landed on the rounding edge of the total
}

}  // namespace mlaserve
