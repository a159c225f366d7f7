// The MTP (NEXTN) layer against the Python reference (tools/train/make_fixtures.py, part mtp):
// ForwardMtp's logits and normed hidden states at every position of two prompts, whole and in
// chunks, with every kernel table this CPU runs; and ModelDrafter's chain (over MtpDraft) of drafts after a prompt
// against the reference's chained procedure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cpu_model_runner.h"
#include "engine/model_drafter.h"
#include "model/mtp_draft.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "support/draft_chain.h"
#include "support/fixture_tensors.h"
#include "support/kernel_tables.h"

namespace mlaserve {
namespace {

const std::string kSource = MLASERVE_SOURCE_DIR;
const std::string kModelDir = kSource + "/models/shakespeare-mla";
const std::string kFixture = kSource + "/tests/fixtures/shakespeare-mla/mtp.safetensors";

struct MtpPrompt {
  std::vector<TokenId> input_ids;   // [n]
  std::vector<float> hidden;        // [n, H] the target's final-normed hidden states
  std::vector<float> mtp_logits;    // [n - 1, vocab] MTP positions 0..n-2
  std::vector<float> mtp_hidden;    // [n - 1, H]
  TokenId next_token = -1;          // the target's greedy token after the prompt
  std::vector<TokenId> mtp_chain;   // the drafts chained from there
};

std::vector<MtpPrompt> LoadMtpFixture() {
  auto ckpt = Checkpoint::Open(kFixture);
  EXPECT_TRUE(ckpt.ok()) << ckpt.error();
  std::vector<MtpPrompt> prompts;
  if (!ckpt.ok()) return prompts;
  for (int i = 0;; ++i) {
    const std::string p = "p" + std::to_string(i) + ".";
    const TensorView* ids = (*ckpt)->Find(p + "input_ids");
    if (ids == nullptr) break;
    MtpPrompt m;
    m.input_ids = testing::ReadFixtureIds(*ids);
    for (const char* name : {"hidden", "mtp_logits", "mtp_hidden", "next_token", "mtp_chain"}) {
      EXPECT_NE((*ckpt)->Find(p + name), nullptr) << p + name;
      if ((*ckpt)->Find(p + name) == nullptr) return {};
    }
    m.hidden = testing::ReadFixtureF32(*(*ckpt)->Find(p + "hidden"));
    m.mtp_logits = testing::ReadFixtureF32(*(*ckpt)->Find(p + "mtp_logits"));
    m.mtp_hidden = testing::ReadFixtureF32(*(*ckpt)->Find(p + "mtp_hidden"));
    m.next_token = testing::ReadFixtureIds(*(*ckpt)->Find(p + "next_token")).at(0);
    m.mtp_chain = testing::ReadFixtureIds(*(*ckpt)->Find(p + "mtp_chain"));
    prompts.push_back(std::move(m));
  }
  return prompts;
}

std::unique_ptr<HostKvStorage> Storage(const ModelConfig& c, int num_layers, int num_pages) {
  auto s = HostKvStorage::Create({.format = KvFormat::kF32, .num_layers = num_layers, .latent_dim = c.kv_lora_rank,
                                  .rope_dim = c.qk_rope_head_dim, .page_size = 16, .num_pages = num_pages});
  EXPECT_TRUE(s.ok()) << s.error();
  return std::move(s).value();
}

TEST(MtpFixture, ForwardMtpMatchesTheReferenceWholeAndChunked) {
  const std::vector<MtpPrompt> prompts = LoadMtpFixture();
  ASSERT_FALSE(prompts.empty());
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "default mode");
    auto model = Model::Load(kModelDir, ModelOptions{.max_batch_tokens = 128, .max_context = 512,
                                                     .deterministic = deterministic, .load_mtp = true});
    ASSERT_TRUE(model.ok()) << model.error();
    Model& m = **model;
    const ModelConfig& c = m.config();
    const size_t H = size_t(c.hidden_size), vocab = size_t(c.vocab_size);
    std::vector<PageId> pages(32);
    for (size_t i = 0; i < pages.size(); ++i) pages[i] = PageId(i);
    for (const KernelSet* kernels : testing::RunnableKernelTables()) {
      SCOPED_TRACE(kernels->name);
      for (size_t pi = 0; pi < prompts.size(); ++pi) {
        SCOPED_TRACE("prompt " + std::to_string(pi));
        const MtpPrompt& fp = prompts[pi];
        const int n = int(fp.input_ids.size());
        // The target's final-normed hidden states (every token's, Model::all_hidden_rows).
        auto target_kv = Storage(c, c.num_hidden_layers, 32);
        std::vector<float> logits(size_t(n) * vocab);
        const ForwardSegment whole{.pages = pages, .num_computed_tokens = 0, .num_tokens = n};
        ASSERT_TRUE(m.Forward(*kernels, *target_kv, fp.input_ids, std::span(&whole, 1), LogitsMode::kAllTokens,
                              logits.data()).ok());
        const double hidden_diff = testing::MaxDiff(m.all_hidden_rows(n), fp.hidden);
        EXPECT_LT(hidden_diff, 2e-3);
        // The MTP layer over positions 0..n-2, fed the reference's hidden states: whole, then in
        // two chunks (the second attends over the first's rows in the MTP cache).
        const std::vector<TokenId> next(fp.input_ids.begin() + 1, fp.input_ids.end());
        for (int split : {n - 1, (n - 1) / 2}) {
          auto mtp_kv = Storage(c, 1, 32);
          std::vector<float> mtp_logits(size_t(n - 1) * vocab), mtp_hidden(size_t(n - 1) * H);
          for (int begin = 0; begin < n - 1;) {
            const int count = begin == 0 ? split : n - 1 - begin;
            const ForwardSegment seg{.pages = pages, .num_computed_tokens = begin, .num_tokens = count};
            ASSERT_TRUE(m.ForwardMtp(*kernels, *mtp_kv, std::span(next).subspan(size_t(begin), size_t(count)),
                                     std::span(fp.hidden).subspan(size_t(begin) * H, size_t(count) * H),
                                     std::span(&seg, 1), LogitsMode::kAllTokens,
                                     mtp_logits.data() + size_t(begin) * vocab).ok());
            const std::span<const float> g = m.all_hidden_rows(count);
            std::copy(g.begin(), g.end(), mtp_hidden.begin() + int64_t(begin) * int64_t(H));
            begin += count;
          }
          const double logit_diff = testing::MaxDiff(mtp_logits, fp.mtp_logits);
          const double g_diff = testing::MaxDiff(mtp_hidden, fp.mtp_hidden);
          EXPECT_LT(logit_diff, 1e-3) << "first chunk " << split;
          EXPECT_LT(g_diff, 2e-3) << "first chunk " << split;
          std::printf("[mtp fixture] %s%s prompt %zu (%d tokens, first chunk %d): max |logit diff| %.3g, "
                      "|hidden diff| %.3g (target %.3g)\n",
                      kernels->name, deterministic ? " deterministic" : "", pi, n, split, logit_diff, g_diff,
                      hidden_diff);
        }
      }
    }
  }
}

// The drafter after a prefill: the engine's pieces (runner, page ids, a request) and one
// Observe give the reference's chain d_1..d_3.
TEST(MtpFixture, DrafterChainsTheReferenceDrafts) {
  const std::vector<MtpPrompt> prompts = LoadMtpFixture();
  ASSERT_FALSE(prompts.empty());
  auto model = Model::Load(kModelDir, ModelOptions{.max_batch_tokens = 128, .max_context = 512, .load_mtp = true});
  ASSERT_TRUE(model.ok()) << model.error();
  const ModelConfig& c = (*model)->config();
  auto target_kv = Storage(c, c.num_hidden_layers, 32);
  auto mtp_kv = Storage(c, 1, 32);
  auto allocator = PageAllocator::Create(16, 32);
  ASSERT_TRUE(allocator.ok());
  CpuModelRunner runner(**model, DefaultKernels(), *target_kv);
  runner.ReserveLogitsRows(4);
  for (const MtpPrompt& fp : prompts) {
    const int steps = int(fp.mtp_chain.size());
    MtpDraft draft(**model, DefaultKernels(), *mtp_kv);
    ModelDrafter drafter(draft, (*model)->max_batch_tokens(), (*model)->max_context(), steps);
    const testing::ObservedPrompt observed = testing::PrefillAndObserve(runner, **allocator, drafter, fp.input_ids, steps);
    ASSERT_NE(observed.request, nullptr);
    const Request& r = *observed.request;
    EXPECT_EQ(observed.next_token, fp.next_token);
    EXPECT_EQ(r.next_drafts, fp.mtp_chain);
    std::vector<TokenId> proposed(size_t(steps) - 1);
    EXPECT_EQ(drafter.Propose(r, proposed), steps - 1);  // as many as the caller has room for
    EXPECT_TRUE(std::equal(proposed.begin(), proposed.end(), fp.mtp_chain.begin()));
    // The chain's provisional rows stayed within the request's own pages.
    EXPECT_EQ(r.kv->num_tokens(), int(fp.input_ids.size()));
    EXPECT_GE(r.kv->reserved_tokens(), int(fp.input_ids.size()) + steps - 1);
  }
}

}  // namespace
}  // namespace mlaserve
