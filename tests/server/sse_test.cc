// SseParser: events out of bytes split anywhere, CRLF / CR / LF line ends, multi-line data.
#include "server/sse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mlaserve {
namespace {

std::vector<SseEvent> FeedAll(SseParser& parser, const std::vector<std::string_view>& chunks) {
  std::vector<SseEvent> events;
  for (std::string_view chunk : chunks) parser.Feed(chunk, [&](const SseEvent& e) { events.push_back(e); });
  return events;
}

std::vector<SseEvent> Parse(std::string_view stream) {
  SseParser parser;
  return FeedAll(parser, {stream});
}

std::string Describe(const std::vector<SseEvent>& events) {
  std::string out;
  for (const SseEvent& e : events) out += "[" + e.event + "|" + e.data + "|" + e.id + "]";
  return out;
}

TEST(SseParserTest, OpenAiStyleStream) {
  const auto events = Parse("data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n");
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].data, "{\"a\":1}");
  EXPECT_EQ(events[1].data, "{\"a\":2}");
  EXPECT_EQ(events[2].data, "[DONE]");
  EXPECT_EQ(events[2].event, "");
}

TEST(SseParserTest, FieldsCommentsAndMultiLineData) {
  const std::string stream =
      ": a comment\n"
      "event: update\n"
      "id: 7\n"
      "data: line one\n"
      "data:line two\n"
      "data:  two spaces keep one\n"
      "data\n"
      "retry: 100\n"
      "unknown: x\n"
      "\n"
      "data: after\n"
      "\n";
  const auto events = Parse(stream);
  ASSERT_EQ(events.size(), 2u) << Describe(events);
  EXPECT_EQ(events[0].event, "update");
  EXPECT_EQ(events[0].id, "7");
  EXPECT_EQ(events[0].data, "line one\nline two\n two spaces keep one\n");
  EXPECT_EQ(events[1].event, "");  // the name does not carry over
  EXPECT_EQ(events[1].id, "7");    // the id does
  EXPECT_EQ(events[1].data, "after");
}

TEST(SseParserTest, EventsWithoutDataAreNotEmitted) {
  const auto events = Parse("event: ping\n\n: keepalive\n\ndata:\n\n");
  ASSERT_EQ(events.size(), 1u) << Describe(events);
  EXPECT_EQ(events[0].data, "");  // an empty data line is still data
}

TEST(SseParserTest, CrLfAndLoneCrLineEnds) {
  EXPECT_EQ(Describe(Parse("data: a\r\n\r\ndata: b\r\ndata: c\r\n\r\n")), "[|a|][|b\nc|]");
  EXPECT_EQ(Describe(Parse("data: a\r\rdata: b\rdata: c\r\r")), "[|a|][|b\nc|]");
  EXPECT_EQ(Describe(Parse("data: a\n\r\ndata: b\r\n\n")), "[|a|][|b|]");
}

TEST(SseParserTest, IncompleteTrailingEventIsHeldBack) {
  SseParser parser;
  auto events = FeedAll(parser, {"data: one\n\ndata: two\n"});
  EXPECT_EQ(Describe(events), "[|one|]");
  EXPECT_TRUE(parser.has_pending());
  events = FeedAll(parser, {"\n"});
  EXPECT_EQ(Describe(events), "[|two|]");
  EXPECT_FALSE(parser.has_pending());
}

TEST(SseParserTest, ByteOrderMarkIsSkipped) {
  EXPECT_EQ(Describe(Parse("\xEF\xBB\xBF" "data: x\n\n")), "[|x|]");
  SseParser parser;  // split inside the BOM
  EXPECT_EQ(Describe(FeedAll(parser, {"\xEF", "\xBB", "\xBF" "da", "ta: y\n\n"})), "[|y|]");
  // A BOM-like byte later in the stream is data.
  EXPECT_EQ(Describe(Parse("data: \xEF\xBB\xBF\n\n")), "[|\xEF\xBB\xBF|]");
}

// Every way of cutting the stream in two, and byte by byte, gives the same events.
TEST(SseParserTest, SplitAtEveryByteBoundary) {
  const std::string streams[] = {
      "event: delta\r\ndata: {\"text\": \"he\"}\r\n\r\ndata: line1\r\ndata: line2\r\n\r\ndata: [DONE]\r\n\r\n",
      "data: {\"text\": \"he\"}\n\n: c\ndata: x\ndata: y\n\ndata: [DONE]\n\n",
      "data: a\rdata: b\r\rdata: [DONE]\r\r",
  };
  for (const std::string& stream : streams) {
    const std::string whole = Describe(Parse(stream));
    ASSERT_NE(whole.find("[DONE]"), std::string::npos) << whole;
    for (size_t cut = 0; cut <= stream.size(); ++cut) {
      SseParser parser;
      const std::string_view s(stream);
      EXPECT_EQ(Describe(FeedAll(parser, {s.substr(0, cut), s.substr(cut)})), whole) << "cut at " << cut;
    }
    SseParser parser;
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < stream.size(); ++i) bytes.push_back(std::string_view(stream).substr(i, 1));
    EXPECT_EQ(Describe(FeedAll(parser, bytes)), whole);
  }
  const auto first = Parse(streams[0]);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].event, "delta");
  EXPECT_EQ(first[1].data, "line1\nline2");
  EXPECT_EQ(first[2].data, "[DONE]");
}

}  // namespace
}  // namespace mlaserve
