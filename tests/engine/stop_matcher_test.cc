#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace mlaserve {
namespace {

// Pushes each piece and records what was released after each.
std::vector<std::string> PushAll(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::vector<std::string> released;
  for (const std::string& piece : pieces) released.emplace_back(m.Push(piece));
  return released;
}

using Strings = std::vector<std::string>;

TEST(StopMatcher, FindsAStopStringAcrossPieces) {
  const Strings stops{"###"};
  StopMatcher m(stops);
  EXPECT_EQ(PushAll(m, {"Hello #", "#", "# world"}), (Strings{"Hello ", "", ""}));
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched_index(), 0);
  EXPECT_EQ(m.text(), "Hello ");
  EXPECT_EQ(m.Push("more"), "");  // ignored after a stop
  EXPECT_EQ(m.Finish(), "");
  EXPECT_EQ(m.text(), "Hello ");
}

TEST(StopMatcher, HoldsBackAPossibleStartAndReleasesItWhenDisproved) {
  const Strings stops{"abc"};
  StopMatcher m(stops);
  EXPECT_EQ(m.Push("xa"), "x");
  EXPECT_EQ(m.held_back_bytes(), 1u);
  EXPECT_EQ(m.Push("b"), "");
  EXPECT_EQ(m.held_back_bytes(), 2u);
  EXPECT_EQ(m.Push("d"), "abd");
  EXPECT_EQ(m.held_back_bytes(), 0u);
  EXPECT_EQ(m.Push("ab"), "");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Finish(), "ab");  // ended for another reason: the held text is output
  EXPECT_EQ(m.text(), "xabdab");
}

TEST(StopMatcher, OverlappingPrefixes) {
  const Strings stops{"aab"};
  StopMatcher m(stops);
  EXPECT_EQ(PushAll(m, {"a", "a", "a", "b"}), (Strings{"", "", "a", ""}));
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.text(), "a");
}

TEST(StopMatcher, MultipleStopStringsEarliestEndWins) {
  struct Case {
    Strings stops, pieces, released;
    int matched_index;
    std::string text;
  };
  const Case cases[] = {
      // "bc" completes before "abcd" could.
      {{"abcd", "bc"}, {"xabcd"}, {"xa"}, 1, "xa"},
      // Two ending at the same byte: the longer one (starting earlier) is trimmed.
      {{"cd", "abcd"}, {"zab", "cd!"}, {"z", ""}, 1, "z"},
      // The held-back text is the longest possible start over all stop strings ("wx"); the "w"
      // is released once "xy" matches instead of "wxyz".
      {{"xy", "wxyz"}, {"12wx", "y!"}, {"12", "w"}, 0, "12w"},
  };
  for (const Case& c : cases) {
    StopMatcher m(c.stops);
    EXPECT_EQ(PushAll(m, c.pieces), c.released) << c.stops[0];
    EXPECT_EQ(m.matched_index(), c.matched_index) << c.stops[0];
    EXPECT_EQ(m.text(), c.text) << c.stops[0];
  }
}

TEST(StopMatcher, StopStringAtTheVeryStart) {
  const Strings stops{"STOP"};
  StopMatcher m(stops);
  EXPECT_EQ(m.Push("STOP and then"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.text(), "");
}

TEST(StopMatcher, KeepStopStringLikeNoStopTrim) {
  const Strings stops{"</s>"};
  StopMatcher m(stops, /*keep_stop_string=*/true);
  EXPECT_EQ(PushAll(m, {"done<", "/s>tail"}), (Strings{"done", "</s>"}));
  EXPECT_EQ(m.text(), "done</s>");
}

TEST(StopMatcher, Unicode) {
  {
    const Strings stops{"世界"};
    StopMatcher m(stops);
    EXPECT_EQ(PushAll(m, {"你好", "世", "界！"}), (Strings{"你好", "", ""}));
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(m.text(), "你好");
  }
  {
    // A held-back character is released whole when the stop string fails to follow.
    const Strings stops{"é!"};
    StopMatcher m(stops);
    EXPECT_EQ(m.Push("café"), "caf");
    EXPECT_EQ(m.Push("🙂"), "é🙂");
    EXPECT_EQ(m.Push("é!"), "");
    EXPECT_EQ(m.text(), "café🙂");
  }
}

TEST(StopMatcher, NoStopStringsStreamsEverything) {
  const Strings none;
  StopMatcher m(none);
  EXPECT_EQ(m.Push("abc"), "abc");
  EXPECT_EQ(m.Finish(), "");
  const Strings empty_only{""};
  StopMatcher e(empty_only);
  EXPECT_EQ(e.Push("abc"), "abc");
  EXPECT_FALSE(e.stopped());
}

// Against a plain reference on random texts, stop sets and piece splits: the streamed text is
// always a prefix of the final text, and the final text is the text before the first
// (earliest-ending, then longest) occurrence.
TEST(StopMatcher, MatchesAReferenceOnRandomInput) {
  std::mt19937 rng(123);
  auto random_string = [&](int max_len) {
    std::string s(size_t(1 + rng() % unsigned(max_len)), 'a');
    for (char& c : s) c = char('a' + rng() % 3);
    return s;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    Strings stops;
    for (unsigned i = 0, n = 1 + rng() % 3; i < n; ++i) stops.push_back(random_string(4));
    const std::string text = random_string(30);

    // Reference: the first end position where some stop string ends; the longest one there.
    std::string expected = text;
    int expected_index = -1;
    for (size_t end = 1; end <= text.size() && expected_index < 0; ++end) {
      size_t best_len = 0;
      for (size_t i = 0; i < stops.size(); ++i) {
        const std::string& s = stops[i];
        if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0 && s.size() > best_len) {
          best_len = s.size();
          expected_index = int(i);
        }
      }
      if (expected_index >= 0) expected = text.substr(0, end - best_len);
    }

    StopMatcher m(stops);
    std::string streamed;
    for (size_t pos = 0; pos < text.size();) {
      const size_t len = std::min(text.size() - pos, size_t(1 + rng() % 5));
      streamed += m.Push(std::string_view(text).substr(pos, len));
      ASSERT_EQ(expected.compare(0, streamed.size(), streamed), 0) << text;
      pos += len;
    }
    streamed += m.Finish();
    ASSERT_EQ(streamed, expected) << text << " trial " << trial;
    ASSERT_EQ(m.text(), expected);
    ASSERT_EQ(m.matched_index(), expected_index) << text;
  }
}

}  // namespace
}  // namespace mlaserve
