// The tool-call parsers: DeepSeek-V3's and Kimi-K2's formats into calls and content, the same
// whether the text arrives whole, cut anywhere in two, or byte by byte, and malformed tool-call
// text falling back to plain content.
#include "chat/tool_call_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mlaserve::chat {
namespace {

struct Expected {
  std::string content;
  std::vector<ToolCall> calls;
};

// Feeds the pieces and rebuilds the calls from the deltas alone (as a streaming client does),
// checking that each call's first delta names it and later ones do not.
Expected Feed(ToolCallFormat format, const std::vector<std::string>& pieces, const char* how) {
  ToolCallParser parser(format);
  Expected got;
  auto take = [&](ToolCallOutput out) {
    got.content += out.content;
    size_t last = 0;
    bool first = true;
    for (ToolCallDelta& d : out.calls) {
      EXPECT_TRUE(first || d.index > last) << how << ": one delta per call per step, in order";
      first = false;
      last = d.index;
      if (d.starts) {
        EXPECT_EQ(d.index, got.calls.size()) << how;
        got.calls.push_back({d.name, ""});
      } else {
        EXPECT_LT(d.index, got.calls.size()) << how << ": arguments before the call's name";
        EXPECT_TRUE(d.name.empty()) << how;
      }
      if (d.index < got.calls.size()) got.calls[d.index].arguments += d.arguments;
    }
  };
  for (const std::string& piece : pieces) take(parser.Push(piece));
  take(parser.Finish());
  EXPECT_EQ(parser.calls().size(), got.calls.size()) << how;
  return got;
}

void ExpectSame(const Expected& got, const Expected& want, const std::string& what) {
  EXPECT_EQ(got.content, want.content) << what;
  ASSERT_EQ(got.calls.size(), want.calls.size()) << what;
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want.calls[i].name) << what << " call " << i;
    EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments) << what << " call " << i;
  }
}

void ExpectParse(ToolCallFormat format, const std::string& text, const Expected& want) {
  const ToolCallParser::Parsed whole = ToolCallParser::Parse(format, text);
  ExpectSame({whole.content, whole.calls}, want, "whole: " + text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ExpectSame(Feed(format, {text.substr(0, cut), text.substr(cut)}, "two pieces"), want,
               "cut at " + std::to_string(cut) + ": " + text);
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  ExpectSame(Feed(format, bytes, "byte by byte"), want, "byte by byte: " + text);
}

constexpr auto kDeepSeek = ToolCallFormat::kDeepSeekV3;
constexpr auto kKimi = ToolCallFormat::kKimiK2;

std::string DeepSeekCall(const std::string& name, const std::string& args) {
  return "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n" + args + "\n```<｜tool▁call▁end｜>";
}
std::string KimiCall(const std::string& name, int index, const std::string& args) {
  return "<|tool_call_begin|>functions." + name + ":" + std::to_string(index) + "<|tool_call_argument_begin|>" + args +
         "<|tool_call_end|>";
}

TEST(ToolCallParser, Names) {
  EXPECT_EQ(*ToolCallFormatFromName("deepseekv3"), kDeepSeek);
  EXPECT_EQ(*ToolCallFormatFromName("kimi_k2"), kKimi);
  const auto bad = ToolCallFormatFromName("hermes");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("'hermes'"), std::string::npos) << bad.error();
}

TEST(ToolCallParser, DeepSeekV3Calls) {
  const std::string paris = R"({"city": "Paris"})", tokyo = R"({"city": "Tokyo", "days": [1, 2]})";
  ExpectParse(kDeepSeek, "<｜tool▁calls▁begin｜>" + DeepSeekCall("get_weather", paris) + "<｜tool▁calls▁end｜>",
              {"", {{"get_weather", paris}}});
  // Two calls, a newline between them (as SGLang's docstring shows), text before and after.
  ExpectParse(kDeepSeek,
              "Checking. <｜tool▁calls▁begin｜>" + DeepSeekCall("get_weather", paris) + "\n" +
                  DeepSeekCall("get_time", tokyo) + "<｜tool▁calls▁end｜> done",
              {"Checking.  done", {{"get_weather", paris}, {"get_time", tokyo}}});
  // Arguments containing backticks and newlines are the model's text up to the fence.
  ExpectParse(kDeepSeek, "<｜tool▁calls▁begin｜>" + DeepSeekCall("run", "{\"code\": \"a\\n```\\nb\"}\n``"),
              {"", {{"run", "{\"code\": \"a\\n```\\nb\"}\n``"}}});
  // No tool call: all content, including lookalike text.
  ExpectParse(kDeepSeek, "plain <｜tool▁calls text", {"plain <｜tool▁calls text", {}});
  // Cut off inside the arguments (finish_reason length): the call stands with what came.
  ExpectParse(kDeepSeek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1\n``",
              {"", {{"f", "{\"a\": 1\n``"}}});
}

TEST(ToolCallParser, KimiK2Calls) {
  const std::string paris = R"({"city": "Paris"})";
  ExpectParse(kKimi, "<|tool_calls_section_begin|>" + KimiCall("get_weather", 0, paris) + "<|tool_calls_section_end|>",
              {"", {{"get_weather", paris}}});
  ExpectParse(kKimi,
              "Let me check.<|tool_calls_section_begin|>\n" + KimiCall("get_weather", 0, paris) + "\n" +
                  KimiCall("search.web", 1, "{}") + "\n<|tool_calls_section_end|>",
              {"Let me check.", {{"get_weather", paris}, {"search.web", "{}"}}});
  // An id without the "functions." prefix, as SGLang also accepts.
  ExpectParse(kKimi, "<|tool_calls_section_begin|><|tool_call_begin|>lookup:3<|tool_call_argument_begin|>{}<|tool_call_end|>",
              {"", {{"lookup", "{}"}}});
}

TEST(ToolCallParser, MalformedToolCallTextIsPlainContent) {
  const std::string paris = R"({"city": "Paris"})";
  // A header that does not parse: everything from the section on is content.
  const std::string no_sep = "a<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather\n```json\n{}\n```<｜tool▁call▁end｜>";
  ExpectParse(kDeepSeek, no_sep, {no_sep, {}});
  const std::string bad_id = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get weather<|tool_call_argument_begin|>{}";
  ExpectParse(kKimi, bad_id, {bad_id, {}});
  // Text where a call should begin: calls before it stand, the rest is content.
  const std::string first = "<|tool_calls_section_begin|>" + KimiCall("a", 0, "{}");
  ExpectParse(kKimi, first + "oops<|tool_call_end|>", {"oops<|tool_call_end|>", {{"a", "{}"}}});
  // A marker where the header should end.
  const std::string early_end = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f<｜tool▁call▁end｜>x";
  ExpectParse(kDeepSeek, early_end, {early_end, {}});
  // Output that ends in the section or inside a header.
  ExpectParse(kDeepSeek, "hi<｜tool▁calls▁begin｜>", {"hi<｜tool▁calls▁begin｜>", {}});
  ExpectParse(kKimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0",
              {"<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0", {}});
  // Not JSON: the call stands with the text as written (the client validates, as with OpenAI).
  ExpectParse(kDeepSeek, "<｜tool▁calls▁begin｜>" + DeepSeekCall("f", "{not json"), {"", {{"f", "{not json"}}});
  // A header that never ends is not held forever.
  const std::string endless = "<|tool_calls_section_begin|><|tool_call_begin|>" + std::string(600, 'x');
  ToolCallParser parser(kKimi);
  EXPECT_EQ(parser.Push(endless).content, endless);
}

}  // namespace
}  // namespace mlaserve::chat
