#include "support/scripted_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "model/config.h"
#include "model/safetensors_writer.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::testing {

using nlohmann::json;

namespace {
constexpr int kBundledVocab = 2048;
std::string Bundled(const std::string& file) {
  return std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla/" + file;
}
}  // namespace

ScriptedModel::ScriptedModel(const std::vector<ScriptedToken>& tokens, const std::string& chat_template) {
  const int vocab = kBundledVocab + int(tokens.size());
  const CommandResult r = RunMlaserve("init-random --preset tiny --init-std 0 --dtype f32 --set vocab_size=" +
                                      std::to_string(vocab) + " --set num_hidden_layers=1 --out " + ShellQuote(path()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json tokenizer = json::parse(ReadTextFile(Bundled("tokenizer.json")));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const TokenId id = kBundledVocab + TokenId(i);
    tokenizer["added_tokens"].push_back({{"id", id}, {"content", tokens[i].text}, {"single_word", false},
                                         {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                                         {"special", tokens[i].special}});
    ids_[tokens[i].text] = id;
  }
  ids_["<|eos|>"] = eos();
  std::ofstream(path() + "/tokenizer.json") << tokenizer.dump();
  std::ofstream(path() + "/tokenizer_config.json") << ReadTextFile(Bundled("tokenizer_config.json"));
  std::ofstream(path() + "/chat_template.jinja") << chat_template;
}

TokenId ScriptedModel::id(const std::string& text) const {
  auto it = ids_.find(text);
  EXPECT_NE(it, ids_.end()) << "no scripted token " << text;
  return it == ids_.end() ? -1 : it->second;
}

json ScriptedModel::Force(const std::vector<std::string>& pieces) const {
  json bias = json::object();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string key = std::to_string(id(pieces[i]));
    EXPECT_FALSE(bias.contains(key)) << "a script uses each piece once: " << pieces[i];
    bias[key] = 100.0 - 0.1 * double(i);
  }
  return {{"logit_bias", bias}, {"presence_penalty", 2.0}, {"temperature", 0}, {"max_tokens", pieces.size() + 4}};
}

void ScriptedModel::Chain(const std::string& after, const std::vector<std::string>& pieces) {
  auto tokenizer = Tokenizer::FromDirectory(path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  std::vector<TokenId> chain;
  const std::optional<TokenId> start = tokenizer->TokenToId(after);
  ASSERT_TRUE(start.has_value()) << after;
  chain.push_back(*start);
  for (const std::string& piece : pieces) chain.push_back(id(piece));
  auto config = LoadModelConfig(path() + "/config.json");
  ASSERT_TRUE(config.ok()) << config.error();
  const int64_t hidden = config->hidden_size, vocab = config->vocab_size;
  ASSERT_LE(int64_t(chain.size()), hidden) << "one embedding direction per chain token";
  SafetensorsWriter writer(path() + "/model.safetensors");
  const std::vector<TensorSpec> specs = ListWeightTensors(*config);
  for (const TensorSpec& spec : specs) writer.Declare(spec.name, DType::kF32, spec.shape);
  ASSERT_TRUE(writer.Begin().ok());
  for (const TensorSpec& spec : specs) {
    int64_t count = 1;
    for (int64_t d : spec.shape) count *= d;
    std::vector<float> data(size_t(count), 0.0f);  // [shape...]
    if (spec.name == "model.embed_tokens.weight") {  // [vocab, hidden]: token k of the chain -> direction k
      for (size_t k = 0; k + 1 < chain.size(); ++k) data[size_t(chain[k] * hidden) + k] = 1.0f;
    } else if (spec.name == "lm_head.weight") {  // [vocab, hidden]: direction k -> the chain's token k + 1
      for (size_t k = 0; k + 1 < chain.size(); ++k) data[size_t(chain[k + 1] * hidden) + k] = 10.0f;
    } else if (spec.name == "model.norm.weight") {  // [hidden]
      std::fill(data.begin(), data.end(), 1.0f);
    }
    ASSERT_TRUE(writer.Write(data.data(), data.size() * sizeof(float)).ok()) << spec.name;
  }
  ASSERT_TRUE(writer.Finish().ok());
  ASSERT_LT(chain.back(), vocab);
}

}  // namespace mlaserve::testing
