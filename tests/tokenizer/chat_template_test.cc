// Chat formats render exactly the strings the models' templates produce.
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mlaserve
