// The reasoning parsers: where reasoning ends and the answer begins for deepseek-r1 and kimi,
// and the same split whether the text arrives whole, in two pieces cut anywhere, or byte by byte.
#include "chat/reasoning_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mlaserve::chat {
namespace {

ReasoningSplit Feed(ReasoningFormat format, const std::vector<std::string>& pieces, bool thinking = true) {
  ReasoningParser parser(format, thinking);
  ReasoningSplit all;
  for (const std::string& piece : pieces) {
    ReasoningSplit s = parser.Push(piece);
    all.reasoning += s.reasoning;
    all.content += s.content;
  }
  ReasoningSplit s = parser.Finish();
  all.reasoning += s.reasoning;
  all.content += s.content;
  return all;
}

void ExpectSplit(ReasoningFormat format, const std::string& text, const std::string& reasoning,
                 const std::string& content, bool thinking = true) {
  const ReasoningSplit whole = ReasoningParser::Split(format, text, thinking);
  EXPECT_EQ(whole.reasoning, reasoning) << text;
  EXPECT_EQ(whole.content, content) << text;
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const ReasoningSplit two = Feed(format, {text.substr(0, cut), text.substr(cut)}, thinking);
    EXPECT_EQ(two.reasoning, reasoning) << "cut at " << cut << " of " << text;
    EXPECT_EQ(two.content, content) << "cut at " << cut << " of " << text;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const ReasoningSplit each = Feed(format, bytes, thinking);
  EXPECT_EQ(each.reasoning, reasoning) << "byte by byte: " << text;
  EXPECT_EQ(each.content, content) << "byte by byte: " << text;
}

TEST(ReasoningParser, Names) {
  EXPECT_EQ(*ReasoningFormatFromName("deepseek-r1"), ReasoningFormat::kDeepSeekR1);
  EXPECT_EQ(*ReasoningFormatFromName("kimi"), ReasoningFormat::kKimi);
  const auto bad = ReasoningFormatFromName("qwen3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("'qwen3'"), std::string::npos) << bad.error();
}

TEST(ReasoningParser, DeepSeekR1StartsInsideTheReasoning) {
  const auto r1 = ReasoningFormat::kDeepSeekR1;
  ExpectSplit(r1, "Let me think.\n</think>\n\nThe answer is 42.", "Let me think.\n", "\n\nThe answer is 42.");
  // R1-0528 writes the opening tag itself.
  ExpectSplit(r1, "<think>hmm</think>42", "hmm", "42");
  // Cut off before </think>: all reasoning, a partial end tag included.
  ExpectSplit(r1, "still thinking </thi", "still thinking </thi", "");
  ExpectSplit(r1, "<thi", "<thi", "");
  ExpectSplit(r1, "", "", "");
  // Only the first </think> ends the reasoning; a later one is answer text.
  ExpectSplit(r1, "a</think>b</think>c", "a", "b</think>c");
  // A <think> later in the reasoning is reasoning text.
  ExpectSplit(r1, "x<think>y</think>z", "x<think>y", "z");
  ExpectSplit(r1, "ünïcödé </think>✓", "ünïcödé ", "✓");
}

TEST(ReasoningParser, DeepSeekR1WithThinkingOffStartsInTheAnswer) {
  const auto r1 = ReasoningFormat::kDeepSeekR1;
  ExpectSplit(r1, "The answer is 42.", "", "The answer is 42.", /*thinking=*/false);
  ExpectSplit(r1, "<think>hmm</think>42", "hmm", "42", /*thinking=*/false);
  ExpectSplit(r1, "42 </think> x", "", "42 </think> x", /*thinking=*/false);
}

TEST(ReasoningParser, KimiNeedsTheOpeningMarkerFirst) {
  const auto kimi = ReasoningFormat::kKimi;
  ExpectSplit(kimi, "◁think▷Let me see◁/think▷It is 42.", "Let me see", "It is 42.");
  ExpectSplit(kimi, "It is 42.", "", "It is 42.");
  ExpectSplit(kimi, "It is ◁think▷ 42◁/think▷.", "", "It is ◁think▷ 42◁/think▷.");
  ExpectSplit(kimi, "◁think▷unfinished ◁/thi", "unfinished ◁/thi", "");
  ExpectSplit(kimi, "◁thi", "", "◁thi");
  ExpectSplit(kimi, "<think>a</think>b", "", "<think>a</think>b");
}

}  // namespace
}  // namespace mlaserve::chat
