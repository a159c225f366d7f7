// The EAGLE-3 draft (model/eagle3_draft.h) against the Python reference (tools/train/eagle3.py,
// written by make_fixtures.py --parts eagle3 from the bundled draft models/shakespeare-mla-eagle3):
// the target's captured rows, the draft's logits and output rows at every position (token by
// token, in two chunks, whole) with every kernel table this CPU runs; ModelDrafter's chain after
// a prompt against the reference's; and the one-line errors of bad draft configs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/cpu_model_runner.h"
#include "engine/model_drafter.h"
#include "engine/sampler.h"
#include "model/eagle3_draft.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "support/draft_chain.h"
#include "support/fixture_tensors.h"
#include "support/kernel_tables.h"
#include "support/run_binary.h"

namespace mlaserve {
namespace {

const std::string kSource = MLASERVE_SOURCE_DIR;
const std::string kModelDir = kSource + "/models/shakespeare-mla";
const std::string kDraftDir = kSource + "/models/shakespeare-mla-eagle3";
const std::string kFixture = kSource + "/tests/fixtures/shakespeare-mla/eagle3.safetensors";
const std::vector<int> kCaptureLayers = {1, 2, 3};  // the bundled draft's aux ids [0, 1, 2], + 1

struct Eagle3Prompt {
  std::vector<TokenId> input_ids;   // [n]
  std::vector<float> aux_hidden;    // [n, 3H] the target's rows entering layers 1, 2, 3
  std::vector<float> draft_logits;  // [n - 1, draft_vocab] positions 0..n-2
  std::vector<float> draft_hidden;  // [n - 1, H] the output rows o
  TokenId next_token = -1;          // the target's greedy token after the prompt
  std::vector<TokenId> draft_chain;  // the drafts chained from there
};

std::vector<Eagle3Prompt> LoadEagle3Fixture() {
  auto ckpt = Checkpoint::Open(kFixture);
  EXPECT_TRUE(ckpt.ok()) << ckpt.error();
  std::vector<Eagle3Prompt> prompts;
  if (!ckpt.ok()) return prompts;
  for (int i = 0;; ++i) {
    const std::string p = "p" + std::to_string(i) + ".";
    if ((*ckpt)->Find(p + "input_ids") == nullptr) break;
    for (const char* name : {"aux_hidden", "draft_logits", "draft_hidden", "next_token", "draft_chain"}) {
      EXPECT_NE((*ckpt)->Find(p + name), nullptr) << p + name;
      if ((*ckpt)->Find(p + name) == nullptr) return {};
    }
    Eagle3Prompt e;
    e.input_ids = testing::ReadFixtureIds(*(*ckpt)->Find(p + "input_ids"));
    e.aux_hidden = testing::ReadFixtureF32(*(*ckpt)->Find(p + "aux_hidden"));
    e.draft_logits = testing::ReadFixtureF32(*(*ckpt)->Find(p + "draft_logits"));
    e.draft_hidden = testing::ReadFixtureF32(*(*ckpt)->Find(p + "draft_hidden"));
    e.next_token = testing::ReadFixtureIds(*(*ckpt)->Find(p + "next_token")).at(0);
    e.draft_chain = testing::ReadFixtureIds(*(*ckpt)->Find(p + "draft_chain"));
    prompts.push_back(std::move(e));
  }
  return prompts;
}

std::unique_ptr<HostKvStorage> Storage(const ModelConfig& c, int num_pages) {
  auto s = HostKvStorage::Create({.format = KvFormat::kF32, .num_layers = c.num_hidden_layers,
                                  .latent_dim = c.kv_lora_rank, .rope_dim = c.qk_rope_head_dim, .page_size = 16,
                                  .num_pages = num_pages});
  EXPECT_TRUE(s.ok()) << s.error();
  return std::move(s).value();
}

std::unique_ptr<Model> LoadTarget() {
  auto model = Model::Load(kModelDir, ModelOptions{.max_batch_tokens = 128, .max_context = 512,
                                                   .capture_layers = kCaptureLayers});
  EXPECT_TRUE(model.ok()) << model.error();
  return model.ok() ? std::move(model).value() : nullptr;
}

TEST(Eagle3Fixture, DraftMatchesTheReferenceTokenByTokenChunkedAndWhole) {
  const std::vector<Eagle3Prompt> prompts = LoadEagle3Fixture();
  ASSERT_FALSE(prompts.empty());
  std::unique_ptr<Model> model = LoadTarget();
  ASSERT_NE(model, nullptr);
  const ModelConfig& c = model->config();
  const size_t H = size_t(c.hidden_size), W = 3 * H;
  std::vector<PageId> pages(32);
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = PageId(i);
  for (const KernelSet* kernels : testing::RunnableKernelTables()) {
    SCOPED_TRACE(kernels->name);
    auto draft = Eagle3Draft::Load(kDraftDir, *model, *kernels, 16, 32);
    ASSERT_TRUE(draft.ok()) << draft.error();
    Eagle3Draft& d = **draft;
    const size_t V = size_t(d.config().draft_vocab_size);
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      SCOPED_TRACE("prompt " + std::to_string(pi));
      const Eagle3Prompt& fp = prompts[pi];
      const int n = int(fp.input_ids.size());
      // The target's captured rows (the draft's input) against the reference's.
      auto target_kv = Storage(c, 32);
      std::vector<float> logits(size_t(c.vocab_size));
      const ForwardSegment whole{.pages = pages, .num_computed_tokens = 0, .num_tokens = n};
      ASSERT_TRUE(model->Forward(*kernels, *target_kv, fp.input_ids, std::span(&whole, 1),
                                 LogitsMode::kLastPerSegment, logits.data()).ok());
      const double aux_diff = testing::MaxDiff(model->captured_rows(n), fp.aux_hidden);
      EXPECT_LT(aux_diff, 2e-3);
      // The draft over positions 0..n-2 fed the reference's rows: token by token (every position's
      // logits and output row), in two chunks, and whole (each chunk's last position).
      const std::vector<TokenId> next(fp.input_ids.begin() + 1, fp.input_ids.end());
      for (int first_chunk : {1, (n - 1) / 2, n - 1}) {
        double logit_diff = 0, hidden_diff = 0;
        for (int begin = 0; begin < n - 1;) {
          const int count = first_chunk == 1 ? 1 : begin == 0 ? first_chunk : n - 1 - begin;
          const ForwardSegment seg{.pages = pages, .num_computed_tokens = begin, .num_tokens = count};
          TokenId token = -1;
          std::vector<float> out(H);
          ASSERT_TRUE(d.Forward(std::span(next).subspan(size_t(begin), size_t(count)),
                                std::span(fp.aux_hidden).subspan(size_t(begin) * W, size_t(count) * W),
                                /*from_target=*/true, std::span(&seg, 1), std::span(&token, 1), out).ok());
          const size_t last = size_t(begin + count - 1);
          const std::span<const float> want_logits = std::span(fp.draft_logits).subspan(last * V, V);
          logit_diff = std::max(logit_diff, testing::MaxDiff(d.last_logits(1), want_logits));
          hidden_diff = std::max(hidden_diff, testing::MaxDiff(out, std::span(fp.draft_hidden).subspan(last * H, H)));
          EXPECT_EQ(token, d.draft_to_target()[size_t(ArgMax(want_logits))]) << "position " << last;
          begin += count;
        }
        EXPECT_LT(logit_diff, 1e-3) << "first chunk " << first_chunk;
        EXPECT_LT(hidden_diff, 2e-3) << "first chunk " << first_chunk;
        std::printf("[eagle3 fixture] %s prompt %zu (%d tokens, first chunk %d): max |logit diff| %.3g, "
                    "|output row diff| %.3g (captured rows %.3g)\n",
                    kernels->name, pi, n, first_chunk, logit_diff, hidden_diff, aux_diff);
      }
    }
  }
}

// The drafter after a prefill: the engine's pieces (runner, page ids, a request) and one Observe
// give the reference's chain d_1..d_3.
TEST(Eagle3Fixture, DrafterChainsTheReferenceDrafts) {
  const std::vector<Eagle3Prompt> prompts = LoadEagle3Fixture();
  ASSERT_FALSE(prompts.empty());
  std::unique_ptr<Model> model = LoadTarget();
  ASSERT_NE(model, nullptr);
  auto target_kv = Storage(model->config(), 32);
  auto allocator = PageAllocator::Create(16, 32);
  ASSERT_TRUE(allocator.ok());
  auto draft = Eagle3Draft::Load(kDraftDir, *model, DefaultKernels(), 16, 32);
  ASSERT_TRUE(draft.ok()) << draft.error();
  CpuModelRunner runner(*model, DefaultKernels(), *target_kv);
  runner.ReserveLogitsRows(4);
  for (const Eagle3Prompt& fp : prompts) {
    const int steps = int(fp.draft_chain.size());
    ModelDrafter drafter(**draft, model->max_batch_tokens(), model->max_context(), steps);
    const testing::ObservedPrompt observed = testing::PrefillAndObserve(runner, **allocator, drafter, fp.input_ids, steps);
    ASSERT_NE(observed.request, nullptr);
    EXPECT_EQ(observed.next_token, fp.next_token);
    EXPECT_EQ(observed.request->next_drafts, fp.draft_chain);
    EXPECT_EQ(observed.request->kv->num_tokens(), int(fp.input_ids.size()));
    EXPECT_GE(observed.request->kv->reserved_tokens(), int(fp.input_ids.size()) + steps - 1);
  }
}

// Bad draft directories: one line naming the problem, from the config or against the target.
TEST(Eagle3Draft, BadConfigsAreRefusedByName) {
  testing::TempDir dir;
  auto write = [&](const std::string& json) {
    std::ofstream(dir.path() + "/config.json") << json;
  };
  auto error_of = [&]() -> std::string {
    auto c = ReadEagle3Config(dir.path());
    return c.ok() ? "" : c.error();
  };
  const std::string good_fields =
      R"("hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 2048, "draft_vocab_size": 1024)";
  write(R"({"architectures": ["LlamaForCausalLM"], )" + good_fields + "}");
  EXPECT_NE(error_of().find("LlamaForCausalLMEagle3"), std::string::npos) << error_of();
  write(R"({"architectures": ["LlamaForCausalLMEagle3"], "rope_scaling": {"type": "llama3"}, )" + good_fields + "}");
  EXPECT_NE(error_of().find("rope_scaling"), std::string::npos) << error_of();
  write(R"({"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 2, )" + good_fields + "}");
  EXPECT_NE(error_of().find("num_hidden_layers"), std::string::npos) << error_of();
  write(R"({"architectures": ["LlamaForCausalLMEagle3"], "mlp_bias": null, "attention_bias": "no", )" + good_fields + "}");
  EXPECT_NE(error_of().find("field 'attention_bias' must be true or false"), std::string::npos) << error_of();
  write(R"({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 256})");
  EXPECT_NE(error_of().find("intermediate_size"), std::string::npos) << error_of();
  write(R"({"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2]}, )" +
        good_fields + "}");
  EXPECT_NE(error_of().find("3 layer ids"), std::string::npos) << error_of();

  // Layer ids against the target's depth: SGLang's default [2, L/2, L-3] does not fit 4 layers.
  write(R"({"architectures": ["LlamaForCausalLMEagle3"], )" + good_fields + "}");
  auto config = ReadEagle3Config(dir.path());
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_FALSE(config->CaptureLayers(4).ok());
  EXPECT_EQ(config->CaptureLayers(61).value(), (std::vector<int>{2, 30, 58}));
  config->aux_layer_ids = {0, 1, 2};
  EXPECT_EQ(config->CaptureLayers(4).value(), kCaptureLayers);
  config->aux_layer_ids = {0, 1, 3};  // the last layer's output: SGLang captures up to L - 2
  EXPECT_FALSE(config->CaptureLayers(4).ok());

  // A good config whose tensors are missing; a target not capturing the draft's layers.
  std::unique_ptr<Model> model = LoadTarget();
  ASSERT_NE(model, nullptr);
  write(R"({"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}, )" +
        good_fields + "}");
  std::ofstream(dir.path() + "/model.safetensors") << std::string("\x02\0\0\0\0\0\0\0{}", 10);  // no tensors
  auto missing = Eagle3Draft::Load(dir.path(), *model, DefaultKernels(), 16, 4);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("fc.weight"), std::string::npos) << missing.error();
  // The bundled draft's tensors with one of them replaced: a norm stored I32 (same bytes), a
  // d2t mapping a token past the vocabulary.
  auto bundled = Checkpoint::Open(kDraftDir);
  ASSERT_TRUE(bundled.ok()) << bundled.error();
  std::filesystem::copy_file(kDraftDir + "/config.json", dir.path() + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto rewrite_with = [&](const std::string& replaced, DType dtype, const std::vector<std::byte>& bytes) {
    SafetensorsWriter writer(dir.path() + "/model.safetensors");
    for (const auto& [name, t] : (*bundled)->tensors()) writer.Declare(name, name == replaced ? dtype : t.dtype, t.shape);
    ASSERT_TRUE(writer.Begin().ok());
    for (const auto& [name, t] : (*bundled)->tensors()) {
      ASSERT_TRUE((name == replaced ? writer.Write(bytes.data(), bytes.size()) : writer.Write(t.data, t.num_bytes)).ok());
    }
    ASSERT_TRUE(writer.Finish().ok());
  };
  const TensorView& norm = *(*bundled)->Find("norm.weight");
  std::vector<std::byte> norm_bytes(norm.num_bytes * 2);  // 256 I32 values
  rewrite_with("norm.weight", DType::kI32, norm_bytes);
  auto bad_norm = Eagle3Draft::Load(dir.path(), *model, DefaultKernels(), 16, 4);
  ASSERT_FALSE(bad_norm.ok());
  EXPECT_NE(bad_norm.error().find("norm.weight is I32"), std::string::npos) << bad_norm.error();
  const TensorView& d2t = *(*bundled)->Find("d2t");
  std::vector<std::byte> d2t_bytes(d2t.data, d2t.data + d2t.num_bytes);
  const int64_t past_the_vocabulary = 4096;
  std::memcpy(d2t_bytes.data() + 8 * 5, &past_the_vocabulary, 8);
  rewrite_with("d2t", DType::kI64, d2t_bytes);
  auto bad_d2t = Eagle3Draft::Load(dir.path(), *model, DefaultKernels(), 16, 4);
  ASSERT_FALSE(bad_d2t.ok());
  EXPECT_NE(bad_d2t.error().find("d2t maps draft token 5 to 4101"), std::string::npos) << bad_d2t.error();

  auto plain = Model::Load(kModelDir, ModelOptions{.max_batch_tokens = 64, .max_context = 128});
  ASSERT_TRUE(plain.ok());
  auto not_captured = Eagle3Draft::Load(kDraftDir, **plain, DefaultKernels(), 16, 4);
  ASSERT_FALSE(not_captured.ok());
  EXPECT_NE(not_captured.error().find("capturing"), std::string::npos) << not_captured.error();
}


// The draft's integers are checked whole before narrowing: 4294967297 layers used to read as the
// one layer a draft has, and a layer id past 2^32 as its low bits.
TEST(Eagle3Draft, IntegersPastInt32AreRefusedWhole) {
  testing::TempDir dir;
  const std::string source = dir.path() + "/config.json";
  auto error_of = [&](const std::string& fields) -> std::string {
    std::ofstream(source) << R"({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 2048, )" + fields + "}";
    auto c = ReadEagle3Config(dir.path());
    return c.ok() ? "" : c.error();
  };
  EXPECT_EQ(error_of(R"("intermediate_size": 512, "num_hidden_layers": 4294967297)"),
            source + ": field 'num_hidden_layers' must be an integer in [1, 1024], got 4294967297");
  EXPECT_EQ(error_of(R"("intermediate_size": 4294967808)"),
            source + ": field 'intermediate_size' must be an integer in [1, 1048576], got 4294967808");
  EXPECT_EQ(error_of(R"("intermediate_size": 512, "draft_vocab_size": -1)"),
            source + ": field 'draft_vocab_size' must be an integer in [1, 16777216], got -1");
  EXPECT_EQ(error_of(R"("intermediate_size": 512, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 4294967298]})"),
            source + ": eagle_config.eagle_aux_hidden_state_layer_ids must list 3 layer ids in [0, 1024], got [0,1,4294967298]");
  EXPECT_EQ(error_of(R"("intermediate_size": 512, "eagle_config": {"use_aux_hidden_state": 1})"),
            source + ": field 'eagle_config.use_aux_hidden_state' must be true or false");
  EXPECT_EQ(error_of(R"("intermediate_size": 512)"), "");
}

}  // namespace
}  // namespace mlaserve
