// The engine against the Python reference (tools/train/make_fixtures.py): logits at every
// position and greedy continuations, for the bundled DeepSeek-V3-style model and a random
// DeepSeek-V2-Lite-style checkpoint, with every kernel table this CPU runs, in the default and
// the deterministic mode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "model/quantize.h"
#include "model/safetensors.h"
#include "support/fixture_tensors.h"
#include "support/run_binary.h"
#include "support/kernel_tables.h"

namespace mlaserve {
namespace {

const std::string kSource = MLASERVE_SOURCE_DIR;

struct FixturePrompt {
  std::vector<TokenId> input_ids;
  std::vector<float> logits;  // [n, vocab]
  std::vector<TokenId> greedy;
};

std::vector<FixturePrompt> LoadFixture(const std::string& path) {
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.error();
  std::vector<FixturePrompt> prompts;
  if (!ckpt.ok()) return prompts;
  for (int i = 0;; ++i) {
    const std::string p = "p" + std::to_string(i) + ".";
    const TensorView* ids = (*ckpt)->Find(p + "input_ids");
    if (ids == nullptr) break;
    const TensorView* logits = (*ckpt)->Find(p + "logits");
    const TensorView* greedy = (*ckpt)->Find(p + "greedy");
    EXPECT_TRUE(logits != nullptr && greedy != nullptr);
    FixturePrompt fp;
    fp.input_ids = testing::ReadFixtureIds(*ids);
    fp.greedy = testing::ReadFixtureIds(*greedy);
    fp.logits.resize(size_t(logits->numel()));
    std::memcpy(fp.logits.data(), logits->data, logits->num_bytes);
    prompts.push_back(std::move(fp));
  }
  return prompts;
}

void CheckModelAgainstFixture(const std::string& model_dir, const std::string& fixture_path,
                              double tolerance) {
  const auto prompts = LoadFixture(fixture_path);
  ASSERT_FALSE(prompts.empty());
  // Both modes: the default one runs prompt chunks in the MHA form, the deterministic one in the
  // absorbed form split along the KV length (the 300-token prompt spans two splits).
  for (bool deterministic : {false, true}) {
  SCOPED_TRACE(deterministic ? "deterministic" : "default mode");
  // Small batches so that long prompts are chunked, exercising KV reuse across Forward calls.
  auto model = Model::Load(model_dir, ModelOptions{.max_batch_tokens = 100, .max_context = 512,
                                                   .deterministic = deterministic});
  ASSERT_TRUE(model.ok()) << model.error();
  const int vocab = (*model)->config().vocab_size;
  for (const KernelSet* kernels : testing::RunnableKernelTables()) {
    SCOPED_TRACE(kernels->name);
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      SCOPED_TRACE("prompt " + std::to_string(pi));
      const FixturePrompt& fp = prompts[pi];
      auto created = SequenceRunner::Create(**model, *kernels, {.kv_format = KvFormat::kF32});
      ASSERT_TRUE(created.ok()) << created.error();
      SequenceRunner& runner = **created;
      double max_diff = 0.0;
      auto sink = [&](int first, int count, const float* logits) {
        for (size_t i = 0; i < size_t(count) * vocab; ++i) {
          max_diff = std::max(max_diff, std::abs(double(logits[i]) -
                                                 fp.logits[size_t(first) * vocab + i]));
        }
      };
      SequenceRunner::LogitsSink sink_ref(sink);
      ASSERT_TRUE(runner.Append(fp.input_ids, &sink_ref).ok());
      EXPECT_LT(max_diff, tolerance);
      std::printf("[fixture] %s%s prompt %zu (%zu tokens): max |logit diff| %.3g\n", kernels->name,
                  deterministic ? " deterministic" : "", pi, fp.input_ids.size(), max_diff);

      // Greedy continuation, one decode step at a time.
      std::vector<TokenId> generated;
      for (size_t step = 0; step < fp.greedy.size(); ++step) {
        const TokenId next = ArgMax(runner.last_logits());
        generated.push_back(next);
        ASSERT_TRUE(runner.Append(std::span(&next, 1)).ok());
      }
      EXPECT_EQ(generated, fp.greedy);
    }
  }
  }
}

// Attention tiles stop at page ends: every page size must read every row (same logits as 16).
TEST(ReferenceFixture, EveryPageSizeReadsEveryRow) {
  const auto prompts = LoadFixture(kSource + "/tests/fixtures/shakespeare-mla/fixture.safetensors");
  ASSERT_FALSE(prompts.empty());
  auto model = Model::Load(kSource + "/models/shakespeare-mla", ModelOptions{.max_batch_tokens = 64, .max_context = 512});
  ASSERT_TRUE(model.ok()) << model.error();
  const int vocab = (*model)->config().vocab_size;
  const FixturePrompt& fp = prompts.back();  // the long prompt
  for (int page_size : {1, 3, 8, 16, 24, 40}) {
    auto runner = SequenceRunner::Create(**model, DefaultKernels(), {.kv_format = KvFormat::kF32, .page_size = page_size});
    ASSERT_TRUE(runner.ok()) << runner.error();
    ASSERT_TRUE((*runner)->Append(fp.input_ids).ok());
    const float* expected = fp.logits.data() + (fp.input_ids.size() - 1) * size_t(vocab);
    double max_diff = 0;
    for (int v = 0; v < vocab; ++v) max_diff = std::max(max_diff, std::abs(double((*runner)->last_logits()[size_t(v)]) - expected[v]));
    EXPECT_LT(max_diff, 5e-4) << "page size " << page_size;
  }
}

TEST(ReferenceFixture, BundledShakespeareModel) {
  CheckModelAgainstFixture(kSource + "/models/shakespeare-mla",
                           kSource + "/tests/fixtures/shakespeare-mla/fixture.safetensors", 5e-4);
}

TEST(ReferenceFixture, TinyDeepSeekV2Random) {
  CheckModelAgainstFixture(kSource + "/tests/fixtures/tiny-v2",
                           kSource + "/tests/fixtures/tiny-v2/fixture.safetensors", 5e-4);
}

// Quantized checkpoints: `quantize` rewrites the bundled model (deterministically) and the engine,
// computing on the stored fp8 / int4 weights, must match the Python reference run on the same
// files dequantized independently (tools/train/dequantize.py).
void CheckQuantizedShakespeare(QuantScheme scheme) {
  testing::TempDir dir;
  auto report = QuantizeCheckpoint(kSource + "/models/shakespeare-mla", dir.path(), scheme);
  ASSERT_TRUE(report.ok()) << report.error();
  CheckModelAgainstFixture(dir.path(),
                           kSource + "/tests/fixtures/quant/" + QuantSchemeName(scheme) + ".safetensors", 5e-4);
}

TEST(ReferenceFixture, Fp8BlockQuantizedShakespeare) { CheckQuantizedShakespeare(QuantScheme::kFp8Block); }

TEST(ReferenceFixture, Int4QuantizedShakespeare) { CheckQuantizedShakespeare(QuantScheme::kInt4G32); }

}  // namespace
}  // namespace mlaserve
