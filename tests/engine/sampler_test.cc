#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace mlaserve {
namespace {

// log_softmax of `logits`, the reference for what a greedy draw reports as logprobs.
std::vector<double> LogSoftmax(const std::vector<double>& logits) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (double v : logits) max_logit = std::max(max_logit, v);
  double sum = 0.0;
  for (double v : logits) sum += std::exp(v - max_logit);
  std::vector<double> out;
  for (double v : logits) out.push_back(v - max_logit - std::log(sum));
  return out;
}

// The logprob of every token after the sampler's processing, read back through a greedy draw
// that reports all of them: this is how the tests see the penalised logits.
std::vector<double> ProcessedLogprobs(Sampler& sampler, const std::vector<float>& logits, SamplingParams params,
                                      const SampleContext& context) {
  params.temperature = 0.0f;
  params.top_logprobs_num = int(logits.size());
  LogprobResult result;
  sampler.Sample(logits, params, context, &result);
  std::vector<double> by_id(logits.size());
  for (const TokenLogprob& t : result.top) by_id[size_t(t.token)] = t.logprob;
  return by_id;
}

void ExpectLogprobsOf(const std::vector<double>& actual, const std::vector<double>& expected_logits) {
  const std::vector<double> expected = LogSoftmax(expected_logits);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-5) << "token " << i;
}

// Counts of each token over `n` positions with the given parameters.
std::vector<int> Histogram(Sampler& sampler, const std::vector<float>& logits, const SamplingParams& params,
                           int n) {
  std::vector<int> counts(logits.size());
  for (int pos = 0; pos < n; ++pos) counts[size_t(sampler.Sample(logits, params, pos))]++;
  return counts;
}

TEST(Sampler, GreedyIsArgmax) {
  Sampler s(5);
  const std::vector<float> logits{0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  EXPECT_EQ(s.Sample(logits, SamplingParams{}, 0), 1);
  EXPECT_EQ(s.Sample(logits, SamplingParams{.temperature = 1.0f, .top_k = 1}, 3), 1);
  EXPECT_EQ(s.Sample(logits, SamplingParams{.temperature = 1e-7f, .seed = 5}, 3), 1);  // ~0 is greedy
  const std::vector<float> tie{1.0f, 3.0f, 3.0f};
  EXPECT_EQ(s.Sample(tie, SamplingParams{}, 0), 1);  // lowest id on ties
}

TEST(Sampler, SeededDrawsDependOnlyOnSeedAndPosition) {
  Sampler a(4), b(4);
  const std::vector<float> logits{1.0f, 1.0f, 1.0f, 1.0f};
  const SamplingParams p{.temperature = 1.0f, .seed = 42};
  std::vector<TokenId> first, second;
  for (int pos = 0; pos < 50; ++pos) first.push_back(a.Sample(logits, p, pos));
  for (int pos = 49; pos >= 0; --pos) second.insert(second.begin(), b.Sample(logits, p, pos));
  EXPECT_EQ(first, second);  // order of calls does not matter
  std::vector<TokenId> other;
  for (int pos = 0; pos < 50; ++pos) other.push_back(a.Sample(logits, {.temperature = 1.0f, .seed = 43}, pos));
  EXPECT_NE(first, other);
}

TEST(Sampler, FollowsTheDistributionAndTruncates) {
  Sampler s(3);
  const std::vector<float> logits{std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  const std::vector<int> counts = Histogram(s, logits, {.temperature = 1.0f, .seed = 1}, 20000);
  EXPECT_NEAR(counts[0] / 20000.0, 0.6, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(counts[2] / 20000.0, 0.1, 0.02);
  // top_p 0.7 keeps {0.6, 0.3}; top_k 2 likewise: token 2 never appears.
  for (int pos = 0; pos < 2000; ++pos) {
    EXPECT_NE(s.Sample(logits, {.temperature = 1.0f, .top_p = 0.7f, .seed = 2}, pos), 2);
    EXPECT_NE(s.Sample(logits, {.temperature = 1.0f, .top_k = 2, .seed = 3}, pos), 2);
  }
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  Sampler s(2);
  const std::vector<float> logits{std::log(0.8f), std::log(0.2f)};
  // T = 2: p ~ sqrt(p) -> {2/3, 1/3}; T = 0.5: p ~ p^2 -> {16/17, 1/17}.
  const std::vector<int> warm = Histogram(s, logits, {.temperature = 2.0f, .seed = 9}, 20000);
  EXPECT_NEAR(warm[0] / 20000.0, 2.0 / 3.0, 0.02);
  const std::vector<int> cold = Histogram(s, logits, {.temperature = 0.5f, .seed = 9}, 20000);
  EXPECT_NEAR(cold[0] / 20000.0, 16.0 / 17.0, 0.01);
}

TEST(Sampler, TopKTopPMinPTruncation) {
  Sampler s(4);
  const std::vector<float> logits{std::log(0.5f), std::log(0.25f), std::log(0.15f), std::log(0.1f)};
  const int n = 20000;
  auto seen = [&](const SamplingParams& p) {
    std::vector<int> c = Histogram(s, logits, p, n);
    std::vector<bool> present;
    for (int x : c) present.push_back(x > 0);
    return present;
  };
  using V = std::vector<bool>;
  EXPECT_EQ(seen({.temperature = 1.0f, .seed = 1}), (V{true, true, true, true}));
  EXPECT_EQ(seen({.temperature = 1.0f, .top_k = 2, .seed = 1}), (V{true, true, false, false}));
  EXPECT_EQ(seen({.temperature = 1.0f, .top_k = 3, .seed = 1}), (V{true, true, true, false}));
  EXPECT_EQ(seen({.temperature = 1.0f, .top_k = 0, .seed = 1}), (V{true, true, true, true}));  // 0: off
  // top_p: the smallest prefix with mass >= top_p.
  EXPECT_EQ(seen({.temperature = 1.0f, .top_p = 0.5f, .seed = 1}), (V{true, false, false, false}));
  EXPECT_EQ(seen({.temperature = 1.0f, .top_p = 0.7f, .seed = 1}), (V{true, true, false, false}));
  EXPECT_EQ(seen({.temperature = 1.0f, .top_p = 0.8f, .seed = 1}), (V{true, true, true, false}));
  // top_p applies to the top-k renormalised mass: {2/3, 1/3} -> 0.6 needs only the first.
  EXPECT_EQ(seen({.temperature = 1.0f, .top_p = 0.6f, .top_k = 2, .seed = 1}), (V{true, false, false, false}));
  // min_p: p >= min_p * p_max (0.5).
  EXPECT_EQ(seen({.temperature = 1.0f, .min_p = 0.4f, .seed = 1}), (V{true, true, false, false}));
  EXPECT_EQ(seen({.temperature = 1.0f, .min_p = 0.25f, .seed = 1}), (V{true, true, true, false}));
  EXPECT_EQ(seen({.temperature = 1.0f, .min_p = 1.0f, .seed = 1}), (V{true, false, false, false}));

  // The survivors keep their relative weights: top_k 2 -> {2/3, 1/3}.
  const std::vector<int> c = Histogram(s, logits, {.temperature = 1.0f, .top_k = 2, .seed = 4}, n);
  EXPECT_NEAR(c[0] / double(n), 2.0 / 3.0, 0.02);
}

// The draw by its definition, with a full sort of the vocabulary: by logit (ties by id), the
// top_k prefix, the top_p nucleus of it, min_p, then the walk to u. The nucleus' mass is summed
// in the order the sampler sums it: by rank under top_k, by id otherwise. Also returns the
// nucleus' length.
TokenId FullSortReference(const std::vector<float>& logits, const SamplingParams& p, uint64_t position,
                          size_t* nucleus_length = nullptr) {
  const size_t vocab = logits.size();
  std::vector<int32_t> order(vocab);
  for (size_t i = 0; i < vocab; ++i) order[i] = int32_t(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  const float max_logit = logits[size_t(order[0])];
  std::vector<float> prob(vocab);
  for (size_t i = 0; i < vocab; ++i) prob[i] = std::exp((logits[i] - max_logit) * (1.0f / p.temperature));
  const bool top_k = p.top_k > 1 && size_t(p.top_k) < vocab;
  size_t candidates = top_k ? size_t(p.top_k) : vocab;
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    for (size_t i = 0; i < candidates; ++i) mass += prob[top_k ? size_t(order[i]) : i];
    size_t nucleus = 0;
    for (double cumulative = 0.0; nucleus < candidates && cumulative < double(p.top_p) * mass; ++nucleus) {
      cumulative += prob[size_t(order[nucleus])];
    }
    candidates = nucleus;
  }
  if (nucleus_length != nullptr) *nucleus_length = candidates;
  std::vector<int32_t> kept;
  for (size_t i = 0; i < candidates; ++i) {
    const float q = prob[size_t(order[i])];
    if (q > 0.0f && q >= p.min_p) kept.push_back(order[i]);
  }
  double total = 0.0;
  for (int32_t id : kept) total += prob[size_t(id)];
  const double u = CounterUniform(p.seed.value_or(0), position) * total;
  double cumulative = 0.0;
  for (int32_t id : kept) {
    cumulative += prob[size_t(id)];
    if (u < cumulative) return id;
  }
  return kept.back();
}

// The nucleus is found by sorting in growing blocks; a full sort must give the same draws.
TEST(Sampler, BlockwiseNucleusMatchesAFullSortReference) {
  const int vocab = 5000;
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) logits[size_t(i)] = float(std::sin(i * 12.9898) * 2.0);  // flat-ish
  Sampler s(vocab);
  for (float top_p : {0.05f, 0.5f, 0.9f, 0.999f}) {
    const SamplingParams p{.temperature = 0.7f, .top_p = top_p, .min_p = 0.01f, .seed = 21};
    size_t nucleus = 0;
    for (int pos = 0; pos < 200; ++pos) {
      ASSERT_EQ(s.Sample(logits, p, pos), FullSortReference(logits, p, uint64_t(pos), &nucleus))
          << "top_p " << top_p << " pos " << pos;
    }
    if (top_p > 0.5f) {
      EXPECT_GT(nucleus, 1024u);  // the blocks grew past the first two
    }
  }
}

// top_k is selected in one pass (a heap) and only its candidates' probabilities are computed:
// on many random logit rows, with ties, every top_k / top_p / min_p / temperature combination
// draws what the full sort draws.
TEST(Sampler, TopKSelectionMatchesAFullSortReference) {
  std::mt19937 rng(5);
  Sampler s(4096);
  int with_top_k = 0;
  for (int row = 0; row < 300; ++row) {
    const size_t vocab = std::uniform_int_distribution<size_t>(2, 4096)(rng);
    std::vector<float> logits(vocab);
    std::normal_distribution<float> dist(0.0f, 3.0f);
    const bool ties = row % 2 == 0;  // logits on a coarse grid: many equal values
    for (float& v : logits) v = ties ? std::round(dist(rng) * 2.0f) / 2.0f : dist(rng);
    const int top_k = std::uniform_int_distribution<int>(-1, int(vocab) + 3)(rng);
    const float top_ps[] = {1.0f, 0.3f, 0.9f};
    const float min_ps[] = {0.0f, 0.0f, 0.05f};
    const float temperatures[] = {0.6f, 1.0f, 1.7f};
    const SamplingParams p{.temperature = temperatures[row % 3], .top_p = top_ps[(row / 3) % 3],
                           .top_k = top_k, .min_p = min_ps[(row / 9) % 3], .seed = uint64_t(row)};
    if (top_k > 1 && size_t(top_k) < vocab) ++with_top_k;
    for (int pos = 0; pos < 20; ++pos) {
      const TokenId expected = top_k == 1 ? ArgMax(logits) : FullSortReference(logits, p, uint64_t(pos));
      ASSERT_EQ(s.Sample(logits, p, pos), expected) << "row " << row << " top_k " << top_k << " pos " << pos;
    }
  }
  EXPECT_GT(with_top_k, 200);
}

// Logits {2, -1, 0.5, 1} after an output of tokens 0, 0, 1; each case is checked against the
// log_softmax of hand-computed logits.
class SamplerPenalty : public testing::Test {
 protected:
  SamplerPenalty() {
    for (TokenId t : {0, 0, 1}) history_.Add(t);
  }
  std::vector<double> Processed(const SamplingParams& p) {
    return ProcessedLogprobs(sampler_, logits_, p, {.output_history = &history_});
  }

  Sampler sampler_{4};
  const std::vector<float> logits_{2.0f, -1.0f, 0.5f, 1.0f};
  PenaltyState history_;
};

TEST_F(SamplerPenalty, FrequencyPenaltyByHand) {
  ExpectLogprobsOf(Processed({.frequency_penalty = 0.5f}), {2.0 - 1.0, -1.0 - 0.5, 0.5, 1.0});  // -0.5 * count
}

TEST_F(SamplerPenalty, PresencePenaltyByHand) {
  // Once per distinct token, however often it appeared; negative values reward.
  ExpectLogprobsOf(Processed({.presence_penalty = 0.3f}), {2.0 - 0.3, -1.0 - 0.3, 0.5, 1.0});
  ExpectLogprobsOf(Processed({.presence_penalty = -1.0f}), {3.0, 0.0, 0.5, 1.0});
}

TEST_F(SamplerPenalty, RepetitionPenaltyByHand) {
  // Seen tokens: positive logits divided by r, negative ones multiplied; counts do not matter.
  ExpectLogprobsOf(Processed({.repetition_penalty = 2.0f}), {1.0, -2.0, 0.5, 1.0});
  ExpectLogprobsOf(Processed({.repetition_penalty = 0.5f}), {4.0, -0.5, 0.5, 1.0});
}

TEST_F(SamplerPenalty, AdditiveBeforeScaling) {
  const SamplingParams p{.repetition_penalty = 2.0f, .frequency_penalty = 0.5f, .presence_penalty = 0.3f};
  // token 0: (2 - 0.5*2 - 0.3) / 2 = 0.35; token 1: (-1 - 0.5 - 0.3) * 2 = -3.6.
  ExpectLogprobsOf(Processed(p), {0.35, -3.6, 0.5, 1.0});
  // No history, no penalty.
  ExpectLogprobsOf(ProcessedLogprobs(sampler_, logits_, p, {}), {2.0, -1.0, 0.5, 1.0});
}

TEST(SamplerPenaltyChoice, PenaltiesChangeTheGreedyChoice) {
  Sampler s(3);
  const std::vector<float> logits{3.0f, 2.5f, 0.0f};
  PenaltyState history;
  history.Add(0);
  EXPECT_EQ(s.Sample(logits, {}, {.output_history = &history}), 0);
  EXPECT_EQ(s.Sample(logits, {.repetition_penalty = 1.5f}, {.output_history = &history}), 1);  // 3 / 1.5 = 2
  EXPECT_EQ(s.Sample(logits, {.frequency_penalty = 1.0f}, {.output_history = &history}), 1);
}

TEST(SamplerMinNewTokens, MasksEosAndStopIdsUntilReached) {
  Sampler s(4);
  const std::vector<float> logits{0.0f, 1.0f, 2.0f, 5.0f};  // EOS (3) is the favourite, then 2
  const std::vector<TokenId> eos{3};
  const SamplingParams p{.min_new_tokens = 2, .stop_token_ids = {2}};
  PenaltyState history;
  EXPECT_EQ(s.Sample(logits, p, {.output_history = &history, .eos_token_ids = eos}), 1);
  EXPECT_EQ(s.Sample(logits, p, {.output_history = nullptr, .eos_token_ids = eos}), 1);  // none yet
  history.Add(1);
  EXPECT_EQ(s.Sample(logits, p, {.output_history = &history, .eos_token_ids = eos}), 1);
  history.Add(1);
  EXPECT_EQ(s.Sample(logits, p, {.output_history = &history, .eos_token_ids = eos}), 3);  // reached

  // Masked tokens report -inf and the rest renormalise; sampling never picks them.
  PenaltyState empty;
  const std::vector<double> lp = ProcessedLogprobs(s, logits, p, {.output_history = &empty, .eos_token_ids = eos});
  EXPECT_TRUE(std::isinf(lp[2]) && std::isinf(lp[3]));
  EXPECT_NEAR(std::exp(lp[0]) + std::exp(lp[1]), 1.0, 1e-6);
  SamplingParams sampled = p;
  sampled.temperature = 1.0f;
  sampled.seed = 3;
  for (int pos = 0; pos < 500; ++pos) {
    const TokenId t = s.Sample(logits, sampled, {.position = pos, .seed = 3, .eos_token_ids = eos});
    EXPECT_TRUE(t == 0 || t == 1) << t;
  }
}

TEST(SamplerMinNewTokens, EverythingMaskedFallsBackToTheRawArgmax) {
  Sampler s(2);
  const std::vector<float> logits{0.0f, 1.0f};
  const std::vector<TokenId> eos{0, 1};
  EXPECT_EQ(s.Sample(logits, {.min_new_tokens = 1}, {.eos_token_ids = eos}), 1);
  EXPECT_EQ(s.Sample(logits, {.temperature = 1.0f, .min_new_tokens = 1}, {.eos_token_ids = eos}), 1);
}

TEST(SamplerDeterminism, IndependentOfOtherRequestsAndCallOrder) {
  const int vocab = 50;
  std::vector<float> logits_a(vocab), logits_b(vocab);
  for (int i = 0; i < vocab; ++i) {
    logits_a[size_t(i)] = float(std::sin(i * 0.7) * 3.0);
    logits_b[size_t(i)] = float(std::cos(i * 1.3) * 2.0);
  }
  const SamplingParams pa{.temperature = 0.8f, .top_p = 0.9f, .top_k = 20, .min_p = 0.02f,
                          .repetition_penalty = 1.2f, .frequency_penalty = 0.3f};
  const SamplingParams pb{.temperature = 1.3f, .presence_penalty = 0.5f};
  // Each request alone on its own sampler, feeding back its own tokens.
  auto run_alone = [&](const std::vector<float>& logits, const SamplingParams& p, uint64_t seed) {
    Sampler s(vocab);
    PenaltyState history(64);
    std::vector<TokenId> out;
    for (int pos = 10; pos < 60; ++pos) {
      out.push_back(s.Sample(logits, p, {.position = pos, .seed = seed, .output_history = &history}));
      history.Add(out.back());
    }
    return out;
  };
  const std::vector<TokenId> alone_a = run_alone(logits_a, pa, 11), alone_b = run_alone(logits_b, pb, 12);

  // Both interleaved on one shared sampler (b running ahead by a few positions).
  Sampler shared(vocab);
  PenaltyState ha, hb;
  std::vector<TokenId> a, b;
  for (int step = 0; step < 50; ++step) {
    b.push_back(shared.Sample(logits_b, pb, {.position = 10 + step, .seed = 12, .output_history = &hb}));
    hb.Add(b.back());
    a.push_back(shared.Sample(logits_a, pa, {.position = 10 + step, .seed = 11, .output_history = &ha}));
    ha.Add(a.back());
  }
  EXPECT_EQ(a, alone_a);
  EXPECT_EQ(b, alone_b);
  EXPECT_NE(a, b);
}

TEST(SamplerDeterminism, UnsetSeedUsesTheRequestSeed) {
  const SamplingParams unseeded{.temperature = 1.0f};
  const SamplingParams seeded{.temperature = 1.0f, .seed = 5};
  EXPECT_EQ(ResolveSeed(unseeded, 77), 77u);
  EXPECT_EQ(ResolveSeed(seeded, 77), 5u);
}

TEST(SamplerLogprobs, ReportsTheTemperatureScaledUntruncatedDistribution) {
  Sampler s(4);
  const std::vector<float> logits{2.0f, 1.0f, 0.0f, -1.0f};
  const SamplingParams p{.temperature = 2.0f, .top_k = 2, .seed = 1, .top_logprobs_num = 4};
  LogprobResult result;
  const TokenId t = s.Sample(logits, p, {.position = 3, .seed = 1}, &result);
  EXPECT_EQ(result.chosen.token, t);
  const std::vector<double> expected = LogSoftmax({1.0, 0.5, 0.0, -0.5});  // logits / 2, all four
  EXPECT_NEAR(result.chosen.logprob, expected[size_t(t)], 1e-6);
  ASSERT_EQ(result.top.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(result.top[i].token, TokenId(i));
    EXPECT_NEAR(result.top[i].logprob, expected[i], 1e-6);
  }
  // Asking for logprobs does not change the draw.
  EXPECT_EQ(s.Sample(logits, p, {.position = 3, .seed = 1}), t);
}

TEST(SamplerPenaltyState, CountsAndGrows) {
  PenaltyState h(4);
  for (int i = 0; i < 10000; ++i) h.Add(TokenId((i * 7919) % 3001));
  EXPECT_EQ(h.num_output_tokens(), 10000);
  EXPECT_EQ(h.entries().size(), 3001u);
  int64_t total = 0;
  for (const PenaltyState::Entry& e : h.entries()) {
    EXPECT_EQ(h.CountOf(e.token), e.count);
    total += e.count;
  }
  EXPECT_EQ(total, 10000);
  EXPECT_EQ(h.CountOf(0), 4);     // i = 0, 3001, 6002, 9003
  EXPECT_EQ(h.CountOf(5000), 0);  // never generated
  EXPECT_EQ(h.entries().front().token, 0);  // first-seen order
  EXPECT_EQ(h.entries()[1].token, 7919 % 3001);
}

}  // namespace
}  // namespace mlaserve
