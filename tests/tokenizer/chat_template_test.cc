// Chat formats render exactly the strings the models' templates produce; ChatTemplate finds a
// model's Jinja template (tokenizer_config.json, chat_template.jinja, --chat-template).
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_binary.h"
#include "tokenizer/chat_template.h"

namespace mlaserve {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "Who are you?"},
};

std::string Render(ChatFormat format, const std::vector<ChatMessage>& messages,
                   bool add_generation_prompt) {
  Result<std::string> prompt = ApplyChatTemplate(format, messages, add_generation_prompt);
  EXPECT_TRUE(prompt.ok()) << prompt.error();
  return prompt.ok() ? prompt.value() : "";
}

TEST(ChatTemplate, Mlaserve) {
  EXPECT_EQ(Render(ChatFormat::kMlaserve, kConversation, true),
            "<|bos|><|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>Hello!<|end|>"
            "<|user|>Who are you?<|end|><|assistant|>");
  EXPECT_EQ(Render(ChatFormat::kMlaserve, {{"user", "Hi"}}, false), "<|bos|><|user|>Hi<|end|>");
  EXPECT_EQ(Render(ChatFormat::kMlaserve, {}, true), "<|bos|><|assistant|>");
}

TEST(ChatTemplate, DeepSeekV3) {
  EXPECT_EQ(Render(ChatFormat::kDeepSeekV3, kConversation, true),
            "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜>"
            "<｜User｜>Who are you?<｜Assistant｜>");
  // Every system message moves to the front, joined by a blank line.
  EXPECT_EQ(
      Render(ChatFormat::kDeepSeekV3, {{"system", "A"}, {"user", "q"}, {"system", "B"}}, false),
      "<｜begin▁of▁sentence｜>A\n\nB<｜User｜>q");
  EXPECT_EQ(Render(ChatFormat::kDeepSeekV3, {{"user", "q"}}, true),
            "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜>");
}

TEST(ChatTemplate, KimiK2) {
  EXPECT_EQ(Render(ChatFormat::kKimiK2, kConversation, true),
            "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
            "<|im_user|>user<|im_middle|>Hi<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>Hello!<|im_end|>"
            "<|im_user|>user<|im_middle|>Who are you?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>");
  // Without a leading system message, Kimi's default one is inserted.
  EXPECT_EQ(Render(ChatFormat::kKimiK2, {{"user", "Hi"}}, true),
            "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot "
            "AI.<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>");
}

TEST(ChatTemplate, UnknownRoleIsAnError) {
  const std::vector<ChatMessage> messages = {{"user", "hi"}, {"tool", "42"}};
  for (ChatFormat format : {ChatFormat::kMlaserve, ChatFormat::kDeepSeekV3, ChatFormat::kKimiK2}) {
    Result<std::string> prompt = ApplyChatTemplate(format, messages, true);
    ASSERT_FALSE(prompt.ok());
    EXPECT_NE(prompt.error().find("message 1 has unsupported role 'tool'"), std::string::npos)
        << prompt.error();
  }
}

TEST(ChatTemplate, FormatNames) {
  EXPECT_EQ(ChatFormatFromName("mlaserve").value(), ChatFormat::kMlaserve);
  EXPECT_EQ(ChatFormatFromName("deepseek_v3").value(), ChatFormat::kDeepSeekV3);
  EXPECT_EQ(ChatFormatFromName("kimi-k2").value(), ChatFormat::kKimiK2);
  EXPECT_FALSE(ChatFormatFromName("llama3").ok());
  for (ChatFormat format : {ChatFormat::kMlaserve, ChatFormat::kDeepSeekV3, ChatFormat::kKimiK2}) {
    EXPECT_EQ(ChatFormatFromName(ChatFormatName(format)).value(), format);
  }
  EXPECT_EQ(ChatFormatForModelType("deepseek_v3"), ChatFormat::kDeepSeekV3);
  EXPECT_EQ(ChatFormatForModelType("deepseek_v2"), ChatFormat::kDeepSeekV3);
  EXPECT_EQ(ChatFormatForModelType("kimi_k2"), ChatFormat::kKimiK2);
  EXPECT_EQ(ChatFormatForModelType("mlaserve_tiny"), ChatFormat::kMlaserve);
}


// ---- ChatTemplate: the model's own Jinja template, or the built-in format ----------------------

class ModelChatTemplate : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Tokenizer::FromDirectory(std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla");
    ASSERT_TRUE(t.ok()) << t.error();
    tokenizer_.emplace(std::move(t).value());
  }
  void Write(const std::string& name, const std::string& text) { std::ofstream(dir_.path() + "/" + name) << text; }
  std::string RenderWith(const ChatTemplate& t, const nlohmann::json& messages, const nlohmann::json& kwargs = nullptr) {
    auto out = t.Render(messages, /*add_generation_prompt=*/true, kwargs);
    return out.ok() ? *out : "ERROR: " + out.error();
  }

  testing::TempDir dir_;
  std::optional<Tokenizer> tokenizer_;
  const nlohmann::json user_hi_ = nlohmann::json::parse(R"([{"role": "user", "content": "hi", "name": "ann"}])");
};

TEST_F(ModelChatTemplate, ReadsTheStringFormFromTokenizerConfig) {
  Write("tokenizer_config.json", R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
      "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.name }}:{{ m.content }}]{% endfor %}{{ eos_token }}"})");
  auto t = ChatTemplate::ForModel(dir_.path(), "", *tokenizer_, "deepseek_v3");
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_TRUE(t->is_jinja());
  EXPECT_EQ(t->origin(), dir_.path() + "/tokenizer_config.json");
  EXPECT_EQ(RenderWith(*t, user_hi_), "<s>[ann:hi]</s>");
}

TEST_F(ModelChatTemplate, ReadsTheDefaultOfTheListForm) {
  Write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "tools"},
                                                       {"name": "default", "template": "default {{ messages | length }}"}]})");
  auto t = ChatTemplate::ForModel(dir_.path(), "", *tokenizer_, "");
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(RenderWith(*t, user_hi_), "default 1");
}

TEST_F(ModelChatTemplate, ChatTemplateJinjaWinsOverTheConfigAndTheFlagOverBoth) {
  Write("tokenizer_config.json", R"({"chat_template": "config"})");
  Write("chat_template.jinja", "file{% if thinking %} thinking{% endif %}\n");
  auto t = ChatTemplate::ForModel(dir_.path(), "", *tokenizer_, "");
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(RenderWith(*t, user_hi_), "file");
  EXPECT_EQ(RenderWith(*t, user_hi_, {{"thinking", true}}), "file thinking");
  Write("override.jinja", "override");
  auto o = ChatTemplate::ForModel(dir_.path(), dir_.path() + "/override.jinja", *tokenizer_, "");
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(RenderWith(*o, user_hi_), "override");
  EXPECT_EQ(o->source(), "override");
}

TEST_F(ModelChatTemplate, WithoutATemplateTheBuiltInFormatRenders) {
  Write("tokenizer_config.json", R"({"bos_token": "<|bos|>"})");
  auto t = ChatTemplate::ForModel(dir_.path(), "", *tokenizer_, "deepseek_v3");
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_FALSE(t->is_jinja());
  EXPECT_EQ(t->origin(), "built-in mlaserve");  // the bundled tokenizer's role tokens decide
  EXPECT_EQ(RenderWith(*t, user_hi_), "<|bos|><|user|>hi<|end|><|assistant|>");
  EXPECT_EQ(RenderWith(*t, nlohmann::json::parse(R"([{"role": "user", "content": null}])")),
            "<|bos|><|user|><|end|><|assistant|>");
}

TEST_F(ModelChatTemplate, ErrorsNameTheFileAndLine) {
  Write("chat_template.jinja", "ok\n{% if x %}\nno end");
  auto bad = ChatTemplate::ForModel(dir_.path(), "", *tokenizer_, "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), dir_.path() + "/chat_template.jinja: chat template line 3: unexpected end of template, "
                                       "expected 'elif' or 'else' or 'endif'");
  auto missing = ChatTemplate::ForModel(dir_.path(), dir_.path() + "/nope.jinja", *tokenizer_, "");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error(), dir_.path() + "/nope.jinja: cannot open");
  // A directory or a device is no template file (issue 24: /dev/zero was read without end).
  auto directory = ChatTemplate::ForModel(dir_.path(), dir_.path(), *tokenizer_, "");
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error(), dir_.path() + ": is a directory, not a file");
  auto device = ChatTemplate::ForModel(dir_.path(), "/dev/zero", *tokenizer_, "");
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.error(), "/dev/zero: not a regular file");
  Write("huge.jinja", std::string((4u << 20) + 1, 'x'));
  auto huge = ChatTemplate::ForModel(dir_.path(), dir_.path() + "/huge.jinja", *tokenizer_, "");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error(), dir_.path() + "/huge.jinja: larger than the 4194304 bytes allowed");
  Write("chat_template.jinja", "{% for m in messages %}\n{{ raise_exception('no ' + m.role) }}{% endfor %}");
  auto t = ChatTemplate::ForModel(dir_.path(), "", *tokenizer_, "");
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(RenderWith(*t, user_hi_),
            "ERROR: " + dir_.path() + "/chat_template.jinja: chat template line 2: the chat template refused the request: no user");
  EXPECT_EQ(RenderWith(*t, user_hi_, {{"messages", 1}}),
            "ERROR: chat template argument 'messages' is set by the server");
  Write("tokenizer_config.json", R"({"chat_template": 5})");
  std::remove((dir_.path() + "/chat_template.jinja").c_str());
  EXPECT_FALSE(ChatTemplate::ForModel(dir_.path(), "", *tokenizer_, "").ok());
}

}  // namespace
}  // namespace mlaserve
