// The json.dumps-style printer the chat templates use (src/tokenizer/py_json.h): output as
// Python's json.dumps(json.loads(text), ensure_ascii=False, indent=...) gives it, keys in the
// order written, streamed from the text without a tree, and stopped at its limit.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/py_json.h"

namespace infercept {
namespace {

std::string py(std::string_view text, int indent = -1, size_t limit = 1u << 30) {
  std::string out, error;
  PyJsonWriter w(out, indent, limit);
  EXPECT_TRUE(write_py_json(text, w, error)) << text << ": " << error;
  return out;
}

TEST(PyJson, MatchesPythonJsonDumps) {
  // Expected strings: python3 -c 'import json; print(json.dumps(json.loads(t),
  // ensure_ascii=False))'
  EXPECT_EQ(py(R"({"b":1,"a":[1,2.5,-3,true,false,null],"c":{}})"),
            R"({"b": 1, "a": [1, 2.5, -3, true, false, null], "c": {}})");
  EXPECT_EQ(py(R"([[],{},[{}],"x"])"), R"([[], {}, [{}], "x"])");
  EXPECT_EQ(py(R"({"k":"K\u00f6ln \"q\" \\ \n\t\u0001"})"),
            "{\"k\": \"K\xC3\xB6ln \\\"q\\\" \\\\ \\n\\t\\u0001\"}");
  EXPECT_EQ(py("18446744073709551615"), "18446744073709551615");
  EXPECT_EQ(py("-9223372036854775808"), "-9223372036854775808");
  EXPECT_EQ(py("1.0"), "1.0");
  EXPECT_EQ(py("1e5"), "100000.0");
  EXPECT_EQ(py("0.1"), "0.1");
  EXPECT_EQ(py(" \"top\" "), "\"top\"");
  // indent=2
  EXPECT_EQ(py(R"({"a":[1,{"b":[]}],"c":{}})", 2),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": {}\n}");
}

TEST(PyJson, ErrorsAndLimit) {
  std::string out, error;
  PyJsonWriter w(out, -1, 1000);
  EXPECT_FALSE(write_py_json("{\"a\": ", w, error));
  EXPECT_NE(error.find("parse error"), std::string::npos) << error;
  EXPECT_FALSE(w.over());
  std::string out2, error2;
  PyJsonWriter small(out2, -1, 10);
  EXPECT_FALSE(write_py_json(R"(["aaaa", "bbbb", "cccc", "dddd"])", small, error2));
  EXPECT_TRUE(small.over());
  EXPECT_TRUE(error2.empty());
  EXPECT_LT(out2.size(), 20u);  // stopped at the first value past the limit
}

TEST(PyJson, ManyKeysInOneObject) {
  // 200,000 keys: a parsed ordered_json inserts each with a linear search (20 billion string
  // compares here); streamed, it is one pass.
  std::string text = "{", want = "{";
  for (int i = 0; i < 200000; ++i) {
    const std::string k = "\"k" + std::to_string(i) + "\"";
    text += (i ? "," : "") + k + ":" + std::to_string(i);
    want += (i ? ", " : "") + k + ": " + std::to_string(i);
  }
  text += "}";
  want += "}";
  EXPECT_EQ(py(text), want);
}

}  // namespace
}  // namespace infercept
