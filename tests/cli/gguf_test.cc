// GGUF checkpoints end to end, the real binary: the bundled model written as a deepseek2 GGUF
// (`quantize --out-format gguf`, both kv_b layouts) scores and generates as its safetensors
// original, with the tokenizer and chat template read from the file; a tensor type mlaserve does
// not compute is refused with its name and the tensor's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/base64.h"
#include "support/run_binary.h"
#include "support/server_process.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

using testing::RunMlaserve;
using testing::ShellQuote;

const std::string kText = "'ROMEO: But soft, what light through yonder window breaks? It is the east.'";

// `score`'s logprobs of kText; tp_ranks > 1: the same as a tensor-parallel job.
std::vector<double> Logprobs(const std::string& model, int tp_ranks = 1, const std::string& flags = "") {
  const std::string args = "score --model-path " + ShellQuote(model) + " --kv-cache-dtype fp32 --text " + kText + " " + flags;
  auto r = tp_ranks > 1 ? testing::RunCommand(testing::MpirunMlaserve(tp_ranks, args)) : RunMlaserve(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  std::vector<double> out;
  if (j.is_discarded()) return out;
  for (const auto& lp : j["token_logprobs"]) out.push_back(lp.is_number() ? lp.get<double>() : 0.0);
  return out;
}

class GgufCli : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& flags) {
    const std::string path = dir_.path() + "/" + name;
    auto r = RunMlaserve("quantize --model-path " + ShellQuote(testing::BundledModelPath()) + " --out-format gguf --out " +
                         ShellQuote(path) + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("wrote " + path + " (GGUF"), std::string::npos) << r.out;
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(GgufCli, ABf16GgufScoresAsItsSafetensorsOriginalInBothKvLayouts) {
  const std::vector<double> original = Logprobs(testing::BundledModelPath());
  ASSERT_GT(original.size(), 10u);
  for (const char* layout : {"combined", "split"}) {
    const std::string gguf = Write(std::string("bundled-") + layout + ".gguf", std::string("--gguf-kv-layout ") + layout);
    const std::vector<double> scored = Logprobs(gguf);
    ASSERT_EQ(scored.size(), original.size()) << layout << ": the GGUF's tokenizer encodes the text the same";
    for (size_t i = 0; i < scored.size(); ++i) EXPECT_NEAR(scored[i], original[i], 1e-4) << layout << " token " << i;
  }
  // Sharded over two tensor-parallel ranks (the split layout's recombined kv_b cut by heads).
  const std::vector<double> sharded = Logprobs(dir_.path() + "/bundled-split.gguf", 2);
  ASSERT_EQ(sharded.size(), original.size());
  for (size_t i = 0; i < sharded.size(); ++i) EXPECT_NEAR(sharded[i], original[i], 1e-4) << "tp 2, token " << i;
}

// Every block type the writer writes (Q8_0 as llama.cpp's reference quantizer; the K types on the
// bundled model's rows of 256 values, its 128-column ones in Q8_0, as llama.cpp falls back from
// Q6_K; the 32-value Q4_0, Q4_1, Q5_0, Q5_1): computed from their codes and per-group scales (and
// mins), close to the original on every token in both kv layouts with the kernels --kernels auto
// takes on this host (int8 activations where it measured them faster; the bounds: what
// `weights-eval` measured for each, a few times over), not equal to it. With the exact fp32
// reference kernels the two layouts score alike (each multiplies its own codes exactly); int8
// activations amplify the layouts' last-bit differences (a code rounds the other way), so only
// the quality bounds hold there. A split Q8_0 file sharded over two ranks (its pair cut by heads)
// scores as one process does.
TEST_F(GgufCli, BlockTypeGgufsScoreCloseToTheirOriginal) {
  const std::vector<double> original = Logprobs(testing::BundledModelPath());
  struct Case {
    const char* weights;
    double largest, mean;
    double layouts;  // split against combined, fp32 kernels
  };
  // The 32-value blocks divide attn_k_b's 64-value rows, so the split file quantizes W_UK along
  // nope and the combined one along kv_lora: two quantizations, not one stored twice (Q8_0's
  // differ by little enough for 1e-3). (The K types' 256 divide neither: both files hold kv_b in
  // Q8_0.)
  for (const Case& k : {Case{"q8_0", 0.05, 0.02, 1e-3}, Case{"q6_k", 0.1, 0.04, 1e-3}, Case{"q5_k", 0.3, 0.1, 1e-3},
                        Case{"q4_k", 0.6, 0.2, 1e-3}, Case{"q4_0", 0.6, 0.2, 0.05}, Case{"q4_1", 0.6, 0.2, 0.05}, Case{"q5_0", 0.3, 0.1, 0.05},
                        Case{"q5_1", 0.3, 0.1, 0.05}}) {
    const std::string type = k.weights;
    const std::string combined_file = Write(type + "-combined.gguf", "--weights " + type);
    const std::string split_file = Write(type + "-split.gguf", "--weights " + type + " --gguf-kv-layout split");
    for (const std::string& file : {combined_file, split_file}) {
      const std::vector<double> scored = Logprobs(file);
      ASSERT_EQ(scored.size(), original.size());
      double sum = 0, largest = 0;
      for (size_t i = 1; i < original.size(); ++i) {
        const double d = std::abs(scored[i] - original[i]);
        sum += d;
        largest = std::max(largest, d);
      }
      const double mean = sum / double(original.size() - 1);
      EXPECT_LT(largest, k.largest) << file;
      EXPECT_LT(mean, k.mean) << file;
      EXPECT_GT(mean, 0.0) << file << ": quantized weights are not the bf16 ones";
    }
    const std::vector<double> combined = Logprobs(combined_file, 1, "--kernels portable");
    const std::vector<double> split = Logprobs(split_file, 1, "--kernels portable");
    ASSERT_EQ(split.size(), combined.size());
    for (size_t i = 1; i < combined.size(); ++i) EXPECT_NEAR(split[i], combined[i], k.layouts) << type << " token " << i;
    if (type == "q8_0") {
      const std::vector<double> sharded = Logprobs(split_file, 2, "--kernels portable");
      ASSERT_EQ(sharded.size(), split.size());
      for (size_t i = 0; i < split.size(); ++i) EXPECT_NEAR(sharded[i], split[i], 1e-4) << "tp 2, token " << i;
    }
    // plan counts the bytes mlaserve holds for the type.
    auto plan = RunMlaserve("plan --model-path " + ShellQuote(combined_file) + " --device-memory 1");
    std::string held = type + " (as held)";
    std::transform(held.begin(), held.begin() + 4, held.begin(), [](char c) { return char(std::toupper(c)); });
    EXPECT_NE(plan.out.find(held), std::string::npos) << plan.out << plan.err;
  }
}

// --tokenizer-path: a GGUF whose pre-tokenizer mlaserve does not know ("gpt-2" patched to
// "gpt-9") is refused naming it, and loads with the model's tokenizer files given instead, scoring
// as the original; a missing one, or one given to a command that reads no tokenizer, is an error.
TEST_F(GgufCli, TokenizerPathStandsInForTheFilesTokenizer) {
  const std::string gguf = Write("bundled.gguf", "");
  std::string bytes;
  {
    std::ifstream in(gguf, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    bytes = s.str();
  }
  const size_t key = bytes.find("tokenizer.ggml.pre");
  ASSERT_NE(key, std::string::npos);
  const size_t value = bytes.find("gpt-2", key);
  ASSERT_NE(value, std::string::npos);
  bytes.replace(value, 5, "gpt-9");
  const std::string patched = dir_.path() + "/pre.gguf";
  std::ofstream(patched, std::ios::binary) << bytes;
  const std::string args = " --kv-cache-dtype fp32 --text " + kText;
  auto refused = RunMlaserve("score --model-path " + ShellQuote(patched) + args);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("pre-tokenizer 'gpt-9' is not supported"), std::string::npos) << refused.err;
  auto original = RunMlaserve("score --model-path " + ShellQuote(testing::BundledModelPath()) + args);
  auto with_path = RunMlaserve("score --model-path " + ShellQuote(patched) + " --tokenizer-path " +
                               ShellQuote(testing::BundledModelPath()) + args);
  ASSERT_EQ(with_path.exit_code, 0) << with_path.err;
  EXPECT_EQ(with_path.out, original.out);
  auto missing = RunMlaserve("score --model-path " + ShellQuote(gguf) + " --tokenizer-path /nonexistent-tokenizer" + args);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("/nonexistent-tokenizer"), std::string::npos) << missing.err;
  auto unused = RunMlaserve("bench --model-path " + ShellQuote(gguf) + " --tokenizer-path " +
                            ShellQuote(testing::BundledModelPath()));
  EXPECT_NE(unused.exit_code, 0);
  EXPECT_NE(unused.err.find("--tokenizer-path: this command reads no tokenizer"), std::string::npos) << unused.err;
}

TEST_F(GgufCli, GeneratesAsTheOriginalWithTheFilesChatTemplate) {
  const std::string gguf = Write("bundled.gguf", "--weights f32");
  const std::string flags = " --prompt 'JULIET:' --max-new-tokens 24 --temperature 0";
  auto original = RunMlaserve("generate --model-path " + ShellQuote(testing::BundledModelPath()) + flags);
  auto from_gguf = RunMlaserve("generate --model-path " + ShellQuote(gguf) + flags);
  ASSERT_EQ(original.exit_code, 0) << original.err;
  ASSERT_EQ(from_gguf.exit_code, 0) << from_gguf.err;
  EXPECT_EQ(from_gguf.out, original.out);
  // --chat: the prompt through the chat template, the GGUF's from tokenizer.chat_template.
  auto chat_original = RunMlaserve("generate --chat --model-path " + ShellQuote(testing::BundledModelPath()) + flags);
  auto chat_gguf = RunMlaserve("generate --chat --model-path " + ShellQuote(gguf) + flags);
  ASSERT_EQ(chat_original.exit_code, 0) << chat_original.err;
  ASSERT_EQ(chat_gguf.exit_code, 0) << chat_gguf.err;
  EXPECT_EQ(chat_gguf.out, chat_original.out);
  EXPECT_NE(chat_gguf.out, from_gguf.out) << "the template changed the prompt";
}

// A server on the GGUF file hands its tokenizer to a batch client (GET /tokenizer_file/...), which
// then writes what an in-process run on the safetensors original writes.
TEST_F(GgufCli, ABatchClientOfAGgufServerWritesWhatTheOriginalWrites) {
  const std::string gguf = Write("bundled.gguf", "");
  const std::string input = dir_.path() + "/in.jsonl";
  std::ofstream(input) << R"({"id": "a", "messages": [{"role": "user", "content": "Speak of the king."}]})" "\n"
                       << R"({"id": "b", "prompt": "To be or not to be"})" "\n";
  const std::string common = " --input " + ShellQuote(input) + " --max-new-tokens 16";
  auto local = RunMlaserve("batch --model-path " + ShellQuote(testing::BundledModelPath()) + common + " --output " +
                           ShellQuote(dir_.path() + "/local.jsonl"));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  testing::ServerLaunch launch;
  launch.model_path = gguf;
  testing::ServerProcess server(launch, {});
  auto remote = RunMlaserve("batch --endpoint http://127.0.0.1:" + std::to_string(server.port()) + common +
                            " --output " + ShellQuote(dir_.path() + "/remote.jsonl"));
  ASSERT_EQ(remote.exit_code, 0) << remote.err;
  auto answers = [](const std::string& path) {
    std::vector<std::string> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      out.push_back(j.contains("completion") ? j["completion"].dump() : j["messages"].back().dump());
    }
    return out;
  };
  const std::vector<std::string> expected = answers(dir_.path() + "/local.jsonl");
  ASSERT_EQ(expected.size(), 2u);
  EXPECT_EQ(answers(dir_.path() + "/remote.jsonl"), expected);
}

TEST_F(GgufCli, AnUncomputedTensorTypeIsRefusedByName) {
  const std::string gguf = Write("bundled.gguf", "");
  std::string bytes;
  {
    std::ifstream in(gguf, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    bytes = s.str();
  }
  // blk.0.attn_q_a.weight's info: name, n_dims (2), ne[2], then its type: BF16 (30) -> Q2_K (10),
  // whose blocks (256 values, 84 bytes) take fewer bytes, so the file stays well-formed.
  const std::string name = "blk.0.attn_q_a.weight";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const size_t type_at = at + name.size() + 4 + 2 * 8;
  uint32_t type = 0;
  std::memcpy(&type, bytes.data() + type_at, 4);
  ASSERT_EQ(type, 30u);
  type = 10;
  std::memcpy(bytes.data() + type_at, &type, 4);
  const std::string patched = dir_.path() + "/q2k.gguf";
  std::ofstream(patched, std::ios::binary) << bytes;
  auto r = RunMlaserve("generate --model-path " + ShellQuote(patched) + " --prompt hi --max-new-tokens 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("Q2_K (1 tensors: blk.0.attn_q_a.weight)"), std::string::npos) << r.err;
  // A file that is not GGUF nor safetensors.
  std::ofstream(dir_.path() + "/junk.gguf") << "GGUF but not really";
  auto junk = RunMlaserve("generate --model-path " + ShellQuote(dir_.path() + "/junk.gguf") + " --prompt hi");
  EXPECT_NE(junk.exit_code, 0);
  EXPECT_NE(junk.err.find("junk.gguf"), std::string::npos) << junk.err;
}

// A split GGUF (gguf-split's layout, as published DeepSeek / Kimi files come), given by any shard:
// the same scores and greedy text as the one-file GGUF; plan reads it; a missing shard is named.
TEST_F(GgufCli, ASplitGgufLoadsAsTheOneFile) {
  const std::string one = Write("one.gguf", "--weights q8_0");
  const std::string prefix = dir_.path() + "/split";
  auto w = RunMlaserve("quantize --model-path " + ShellQuote(testing::BundledModelPath()) +
                       " --out-format gguf --weights q8_0 --gguf-split-max-tensors 20 --out " + ShellQuote(prefix + ".gguf"));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_NE(w.out.find("in 4 shards: " + prefix + "-00001-of-00004.gguf"), std::string::npos) << w.out;
  const std::string second = prefix + "-00002-of-00004.gguf";
  const std::string args = " --kv-cache-dtype fp32 --text " + kText;
  auto a = RunMlaserve("score --model-path " + ShellQuote(one) + args);
  auto b = RunMlaserve("score --model-path " + ShellQuote(second) + args);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(b.out, a.out);
  const std::string gen = " --chat --prompt 'JULIET:' --max-new-tokens 16 --temperature 0";
  auto ga = RunMlaserve("generate --model-path " + ShellQuote(one) + gen);
  auto gb = RunMlaserve("generate --model-path " + ShellQuote(prefix + "-00001-of-00004.gguf") + gen);
  ASSERT_EQ(gb.exit_code, 0) << gb.err;
  EXPECT_EQ(gb.out, ga.out);
  auto plan = RunMlaserve("plan --model-path " + ShellQuote(second));
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  std::filesystem::rename(prefix + "-00004-of-00004.gguf", dir_.path() + "/elsewhere.gguf");
  auto missing = RunMlaserve("score --model-path " + ShellQuote(second) + args);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find(prefix + "-00004-of-00004.gguf: missing (shard 4 of the 4"), std::string::npos) << missing.err;
  // A shard under another name says split.count but cannot find its siblings.
  auto renamed = RunMlaserve("score --model-path " + ShellQuote(dir_.path() + "/elsewhere.gguf") + args);
  EXPECT_NE(renamed.err.find("one shard of 4 (split.count), but not named as one"), std::string::npos) << renamed.err;
}

// A Kimi-K2 style directory (tiktoken.model + tokenizer_config.json; the bundled tokenizer's
// tokens as ranks, a few Han tokens after them) written as GGUF: the file says "kimi-k2", and its
// tokenizer (byte-level tokens, one converter-derived merge per token) encodes every text as
// tiktoken does on the directory, long text included; the model scores the same through both.
TEST_F(GgufCli, AKimiTiktokenDirectoryWritesAKimiK2GgufThatTokenizesAsTiktoken) {
  auto bundled = Tokenizer::FromDirectory(testing::BundledModelPath());
  ASSERT_TRUE(bundled.ok()) << bundled.error();
  std::string ranks;
  int num_ranks = 0;
  auto add_rank = [&](std::string_view bytes) { ranks += testing::Base64(bytes) + " " + std::to_string(num_ranks++) + "\n"; };
  for (TokenId id = 0; !bundled->IsSpecial(id) && !bundled->TokenBytes(id).empty(); ++id) add_rank(bundled->TokenBytes(id));
  ASSERT_GT(num_ranks, 1000);
  // Tokens that only Kimi's pattern keeps apart or together: Han runs, "'s" inside a word, digits
  // in threes, runs of letters (cut at 25,000).
  for (const char* extra : {"c\xe4", "\xe4\xbd", "你", "\xe5\xa5", "好", "你好", "\xe4\xb8", "世", "\xe7\x95", "界", "世界", "d'", "d's", "12", "34", "1234", "aa", "aaa", "aaaaaa"}) {
    add_rank(extra);
  }
  const std::string kimi = dir_.path() + "/kimi";
  auto init = RunMlaserve("init-random --out " + ShellQuote(kimi) + " --preset tiny --set vocab_size=" +
                          std::to_string(num_ranks + 256));
  ASSERT_EQ(init.exit_code, 0) << init.err;
  std::filesystem::remove(kimi + "/tokenizer.json");
  std::ofstream(kimi + "/tiktoken.model") << ranks;
  const std::string bos = std::to_string(num_ranks), eos = std::to_string(num_ranks + 1);
  std::ofstream(kimi + "/tokenizer_config.json")
      << R"({"bos_token": "[BOS]", "eos_token": "[EOS]", "added_tokens_decoder": {")" << bos
      << R"(": {"content": "[BOS]", "special": true}, ")" << eos << R"(": {"content": "[EOS]", "special": true}}})";
  const std::string gguf = dir_.path() + "/kimi.gguf";
  auto written = RunMlaserve("quantize --model-path " + ShellQuote(kimi) + " --out-format gguf --out " + ShellQuote(gguf));
  ASSERT_EQ(written.exit_code, 0) << written.err;
  {
    std::ifstream in(gguf, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    EXPECT_NE(bytes.str().find("kimi-k2"), std::string::npos);
  }
  auto tiktoken = Tokenizer::FromDirectory(kimi);
  auto from_gguf = Tokenizer::FromDirectory(gguf);
  ASSERT_TRUE(tiktoken.ok()) << tiktoken.error();
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.error();
  // What a GGUF server hands a batch client (GET /tokenizer_file): the same, long-text cuts included.
  auto files = ReadGgufTokenizer(gguf);
  ASSERT_TRUE(files.ok()) << files.error();
  auto served = Tokenizer::FromJsonText(files->tokenizer_json, files->tokenizer_config_json);
  ASSERT_TRUE(served.ok()) << served.error();
  EXPECT_FALSE(from_gguf->add_bos());
  EXPECT_EQ(from_gguf->bos_id(), tiktoken->bos_id());
  std::string readme;  // prose, code, tables, numbers
  {
    std::ifstream in(std::string(MLASERVE_SOURCE_DIR) + "/README.md");
    std::stringstream s;
    s << in.rdbuf();
    readme = s.str();
  }
  const std::string long_run = "b" + std::string(30'000, 'a');  // past Kimi's 25,000-character run cut
  for (const std::string& text :
       {std::string(kText), std::string("HELLO World's THE cat'S DON'T you'll we'D"), std::string("你好世界 abc你好def世界。"),
        std::string("123456 1234 7\n\n\r\n  x  \t y"), std::string("ÉCOLE naïve Straße ΑΘΗΝΑ"), std::string("[BOS]hi[EOS]"),
        readme, long_run}) {
    auto a = tiktoken->Encode(text, false);
    auto b = from_gguf->Encode(text, false);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*b, *a) << text.substr(0, 80);
    EXPECT_EQ(from_gguf->Decode(*b), tiktoken->Decode(*a));
    auto c = served->Encode(text, false);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(*c, *a) << "served: " << text.substr(0, 80);
  }
  const std::string args = " --kv-cache-dtype fp32 --text " + kText;
  auto original = RunMlaserve("score --model-path " + ShellQuote(kimi) + args);
  auto scored = RunMlaserve("score --model-path " + ShellQuote(gguf) + args);
  ASSERT_EQ(original.exit_code, 0) << original.err;
  ASSERT_EQ(scored.exit_code, 0) << scored.err;
  const nlohmann::json a = nlohmann::json::parse(original.out), b = nlohmann::json::parse(scored.out);
  EXPECT_EQ(b["input_ids"], a["input_ids"]);
  EXPECT_NEAR(b["perplexity"].get<double>(), a["perplexity"].get<double>(), 1e-6 * a["perplexity"].get<double>());
}

}  // namespace
}  // namespace mlaserve
