// `mlaserve batch --reasoning-parser` on a model whose replies the test writes (a bigram chain,
// support/scripted_model.h): OpenAI-messages output splits the answer into reasoning_content and
// content, ShareGPT and prompt output keep the text as the model emitted it, --strip-reasoning
// drops the reasoning everywhere, and the in-process engine and a server write the same answers.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_binary.h"
#include "support/scripted_model.h"
#include "support/server_process.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::ReadTextFile;
using testing::RunMlaserve;
using testing::ShellQuote;

constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}";

constexpr const char* kInput =
    R"({"id": "chat", "messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "old", "reasoning_content": "old thoughts"}]})"
    "\n"
    R"({"id": "sharegpt", "conversations": [{"from": "human", "value": "Weather?"}]})"
    "\n"
    R"({"id": "prompt", "prompt": "Weather?"})"
    "\n";

class BatchReasoningTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new testing::ScriptedModel({{"<think>"}, {"</"}, {"think>"}, {"Let me think"}, {" about it"}, {"Sunny."}},
                                        kTemplate);
    // The prompt ends with "<think>\n": the newline's token starts the chain.
    model_->Chain("Ċ", {"Let me think", " about it", "</", "think>", "Sunny.", "<|eos|>"});
    dir_ = new testing::TempDir();
    std::ofstream(dir_->path() + "/in.jsonl") << kInput;
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete model_;
  }
  // Runs batch with `flags` (in process unless they name an endpoint) into a fresh output and
  // returns its lines by id.
  static std::map<std::string, json> Run(const std::string& name, const std::string& flags) {
    const std::string out = dir_->path() + "/" + name + ".jsonl";
    const auto r = RunMlaserve("batch --input " + ShellQuote(dir_->path() + "/in.jsonl") + " --output " +
                               ShellQuote(out) + " --max-new-tokens 16 " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<std::string, json> lines;
    std::istringstream text(ReadTextFile(out));
    for (std::string line; std::getline(text, line);) {
      const json j = json::parse(line);
      lines[j["id"]] = j;
    }
    EXPECT_EQ(lines.size(), 3u) << r.err;
    return lines;
  }
  static std::string InProcess() { return "--model-path " + ShellQuote(model_->path()); }
  static testing::ScriptedModel* model_;
  static testing::TempDir* dir_;
};
testing::ScriptedModel* BatchReasoningTest::model_ = nullptr;
testing::TempDir* BatchReasoningTest::dir_ = nullptr;

const std::string kEmitted = "Let me think about it</think>Sunny.";

TEST_F(BatchReasoningTest, EachShapeGetsTheReasoningAsItExpects) {
  auto lines = Run("split", InProcess() + " --reasoning-parser deepseek-r1");
  EXPECT_EQ(lines["chat"]["messages"][1],
            json({{"role", "assistant"}, {"content", "Sunny."}, {"reasoning_content", "Let me think about it"}}));
  EXPECT_EQ(lines["sharegpt"]["conversations"][1]["value"], kEmitted);
  EXPECT_EQ(lines["prompt"]["completion"], kEmitted);
  EXPECT_EQ(lines["prompt"]["settings"]["reasoning_parser"], "deepseek-r1");
  EXPECT_EQ(lines["prompt"]["settings"]["strip_reasoning"], false);
  EXPECT_EQ(lines["prompt"]["turns"][0]["finish_reason"], "stop");
  // The output is bound to its settings: resuming it with the reasoning stripped is refused.
  const auto rerun = RunMlaserve("batch --input " + ShellQuote(dir_->path() + "/in.jsonl") + " --output " +
                                 ShellQuote(dir_->path() + "/split.jsonl") + " --max-new-tokens 16 " + InProcess() +
                                 " --reasoning-parser deepseek-r1 --strip-reasoning");
  EXPECT_EQ(rerun.exit_code, 2) << rerun.err;
  EXPECT_NE(rerun.err.find("strip_reasoning"), std::string::npos) << rerun.err;
}

TEST_F(BatchReasoningTest, StripReasoningKeepsTheAnswerOnly) {
  auto lines = Run("strip", InProcess() + " --reasoning-parser deepseek-r1 --strip-reasoning");
  EXPECT_EQ(lines["chat"]["messages"][1], json({{"role", "assistant"}, {"content", "Sunny."}}));
  EXPECT_EQ(lines["sharegpt"]["conversations"][1]["value"], "Sunny.");
  EXPECT_EQ(lines["prompt"]["completion"], "Sunny.");
  EXPECT_EQ(lines["prompt"]["settings"]["strip_reasoning"], true);
  const auto refused = RunMlaserve("batch --input x --output y --strip-reasoning " + InProcess());
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("--strip-reasoning needs --reasoning-parser"), std::string::npos) << refused.err;
}

TEST_F(BatchReasoningTest, WithoutTheFlagTheTextIsAsEmitted) {
  auto lines = Run("plain", InProcess());
  // The input's reasoning_content belonged to the answer being replaced: it goes.
  EXPECT_EQ(lines["chat"]["messages"][1], json({{"role", "assistant"}, {"content", kEmitted}}));
  EXPECT_EQ(lines["sharegpt"]["conversations"][1]["value"], kEmitted);
  EXPECT_FALSE(lines["prompt"]["settings"].contains("reasoning_parser"));
}

TEST_F(BatchReasoningTest, AServerWritesTheSameAnswers) {
  const testing::ServerProcess server(testing::ServerLaunch{.model_path = model_->path()}, {});
  auto local = Run("local", InProcess() + " --reasoning-parser kimi");
  auto remote = Run("remote", "--endpoint " + ShellQuote(server.Url("")) + " --reasoning-parser kimi");
  for (const char* id : {"chat", "sharegpt", "prompt"}) {
    for (const char* field : {"messages", "conversations", "completion"}) {
      if (!local[id].contains(field)) continue;
      EXPECT_EQ(local[id][field], remote[id][field]) << id;
    }
  }
  // kimi's reasoning needs its own opening marker: this model's text is all answer.
  EXPECT_EQ(remote["chat"]["messages"][1], json({{"role", "assistant"}, {"content", kEmitted}, {"reasoning_content", ""}}));
}

}  // namespace
}  // namespace mlaserve
