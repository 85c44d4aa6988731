// StopMatcher: stop strings split across pieces, overlapping prefixes, several stops, and a
// randomized check against matching on the whole text at once.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/stop_matcher.h"

namespace infercept {
namespace {

struct StreamResult {
  std::string emitted;
  bool stopped = false;
};

// Feeds `pieces` in order, then flushes, collecting what would reach the client.
StreamResult feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  StreamResult r;
  for (const auto& p : pieces) {
    auto out = m.push(p);
    r.emitted += out.text;
    if (out.stopped) {
      r.stopped = true;
      break;
    }
  }
  r.emitted += m.flush();
  return r;
}

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  auto out = m.push("hello");
  EXPECT_EQ(out.text, "hello");
  EXPECT_FALSE(out.stopped);
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, NoMatchEmitsEverything) {
  StopMatcher m({"STOP"});
  auto out = m.push("hello world");
  EXPECT_EQ(out.text, "hello world");
  EXPECT_FALSE(out.stopped);
  EXPECT_EQ(m.pending_size(), 0u);
}

TEST(StopMatcher, StopInOnePiece) {
  StopMatcher m({"\n\n"});
  auto out = m.push("one\n\ntwo");
  EXPECT_EQ(out.text, "one");
  EXPECT_TRUE(out.stopped);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more").text, "");
  EXPECT_TRUE(m.push("more").stopped);
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopSplitAcrossPieces) {
  StopMatcher m({"Observation:"});
  auto a = m.push("Thought: go\nObs");
  EXPECT_EQ(a.text, "Thought: go\n");
  EXPECT_FALSE(a.stopped);
  auto b = m.push("erv");
  EXPECT_EQ(b.text, "");
  EXPECT_FALSE(b.stopped);
  auto c = m.push("ation: 42");
  EXPECT_EQ(c.text, "");
  EXPECT_TRUE(c.stopped);
}

TEST(StopMatcher, StopAtVeryStart) {
  StopMatcher m({"<end>"});
  auto out = m.push("<end>tail");
  EXPECT_EQ(out.text, "");
  EXPECT_TRUE(out.stopped);
}

TEST(StopMatcher, FalsePrefixIsReleased) {
  StopMatcher m({"abc"});
  auto a = m.push("xab");
  EXPECT_EQ(a.text, "x");
  EXPECT_EQ(m.pending_size(), 2u);
  auto b = m.push("d");
  EXPECT_EQ(b.text, "abd");
  EXPECT_FALSE(b.stopped);
}

TEST(StopMatcher, HeldTextFlushedAtEnd) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.push("zzab").text, "zz");
  EXPECT_EQ(m.flush(), "ab");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, OverlappingPrefixesShorterCompletesFirst) {
  StopMatcher m({"abc", "ab"});
  auto out = m.push("xab");
  EXPECT_EQ(out.text, "x");
  EXPECT_TRUE(out.stopped);
}

TEST(StopMatcher, OverlappingPrefixesLongerOnly) {
  StopMatcher m({"abc"});
  EXPECT_EQ(feed(m, {"x", "a", "b", "c", "y"}).emitted, "x");
  StopMatcher m2({"abc"});
  auto r = feed(m2, {"x", "a", "b", "a", "b", "c"});
  EXPECT_EQ(r.emitted, "xab");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcher, SelfOverlappingStop) {
  // "aab" inside "aaab": the held suffix must restart one byte later, not give up.
  StopMatcher m({"aab"});
  auto r = feed(m, {"a", "a", "a", "b", "!"});
  EXPECT_EQ(r.emitted, "a");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcher, MultipleStopsEarliestWins) {
  StopMatcher m({"END", "\n"});
  auto out = m.push("line one\nline two END");
  EXPECT_EQ(out.text, "line one");
  EXPECT_TRUE(out.stopped);

  StopMatcher m2({"abc", "bd"});
  auto r = feed(m2, {"xab", "d"});
  EXPECT_EQ(r.emitted, "xa");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcher, MultiByteUtf8) {
  StopMatcher m({"é!"});
  // "é" is two bytes; pieces may split it, but the result is still byte-exact.
  auto r = feed(m, {"caf", "\xc3", "\xa9", "!", "x"});
  EXPECT_EQ(r.emitted, "caf");
  EXPECT_TRUE(r.stopped);
}

TEST(StopMatcher, EmptyStopStringsIgnored) {
  StopMatcher m({"", "zz"});
  auto out = m.push("abc");
  EXPECT_EQ(out.text, "abc");
  EXPECT_FALSE(out.stopped);
}

// Whatever the chunking, the stream must equal "cut the full text at the earliest stop".
TEST(StopMatcher, RandomizedAgainstWholeText) {
  std::mt19937 g(1);
  auto rand_str = [&](size_t max_len, size_t min_len) {
    size_t n = min_len + g() % (max_len - min_len + 1);
    std::string s;
    for (size_t i = 0; i < n; ++i) s += static_cast<char>('a' + g() % 3);
    return s;
  };
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<std::string> stops;
    const int n_stops = static_cast<int>(g() % 3);
    for (int i = 0; i < n_stops; ++i) stops.push_back(rand_str(4, 1));
    const std::string text = rand_str(30, 0);
    size_t cut = std::string::npos;
    for (const auto& s : stops) cut = std::min(cut, text.find(s));
    const std::string expected = cut == std::string::npos ? text : text.substr(0, cut);

    std::vector<std::string> pieces;
    for (size_t pos = 0; pos < text.size();) {
      size_t len = g() % 5;  // empty pieces too
      len = std::min(len, text.size() - pos);
      pieces.push_back(text.substr(pos, len));
      pos += len;
    }
    StopMatcher m(stops);
    StreamResult r;
    for (const auto& p : pieces) {
      auto out = m.push(p);
      r.emitted += out.text;
      // Never emit anything past the cut.
      ASSERT_EQ(expected.compare(0, r.emitted.size(), r.emitted), 0)
          << "text=" << text << " emitted=" << r.emitted;
      if (out.stopped) {
        r.stopped = true;
        break;
      }
    }
    r.emitted += m.flush();
    EXPECT_EQ(r.emitted, expected) << "text=" << text;
    EXPECT_EQ(r.stopped, cut != std::string::npos) << "text=" << text;
  }
}

}  // namespace
}  // namespace infercept
