#include "support/scripted_model.h"

#include <gtest/gtest.h>

#include <fstream>

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

}  // namespace mlaserve::testing
