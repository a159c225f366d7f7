// NativeAnswer writes the bytes nlohmann's dump of the same /generate answer writes: the keys
// in json's sorted order, logprob entries as they were serialized, the text escaped (invalid
// UTF-8 replaced) each time.
#include "server/native_answer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/api_json.h"

namespace mlaserve {
namespace {

using nlohmann::json;

TEST(NativeAnswer, SerializesAsTheJsonTreeDumps) {
  NativeAnswer answer("gen-1", 7);
  json ids = json::array(), logprobs = json::array(), tops = json::array();
  const std::string pieces[] = {"Hel", "lo \"q\"\n", "\xe2\x82"};  // ends mid-character
  for (int t = 0; t < 3; ++t) {
    answer.AppendText(pieces[t]);
    answer.AppendToken(TokenId(10 + t));
    ids.push_back(10 + t);
    const json entry = json::array({-0.25f * float(t + 1), 10 + t, nullptr});
    const json top = json::array({entry, json::array({-3.5f, 99, "x"})});
    answer.AppendLogprob(api::Dump(entry));
    answer.AppendTopLogprobs(api::Dump(top));
    logprobs.push_back(entry);
    tops.push_back(top);
  }
  const json input = json::array({json::array({nullptr, 1, "<s>"}), json::array({-1.5f, 2, "a"})});
  answer.SetInputLogprobs(api::Dump(input), std::nullopt);

  RequestOutput o;
  o.prompt_tokens = 2;
  o.completion_tokens = 3;
  o.cached_tokens = 0;
  o.e2e_latency_s = 0.123456789;
  const json finish = {{"type", "length"}, {"length", 7}};
  json meta{{"id", "gen-1"}, {"finish_reason", finish}, {"prompt_tokens", 2}, {"completion_tokens", 3},
            {"cached_tokens", 0}, {"e2e_latency", 0.123456789}, {"output_token_logprobs", logprobs},
            {"output_top_logprobs", tops}, {"input_token_logprobs", input}};
  json expected{{"text", pieces[0] + pieces[1] + pieces[2]}, {"output_ids", ids}, {"meta_info", meta}};

  std::string got;
  answer.Serialize(o, api::Dump(finish), /*with_logprobs=*/true, std::nullopt, got);
  EXPECT_EQ(got, api::Dump(expected));

  expected["index"] = size_t(3);
  for (const char* key : {"output_token_logprobs", "output_top_logprobs", "input_token_logprobs"}) {
    expected["meta_info"].erase(key);
  }
  got.clear();
  answer.Serialize(o, api::Dump(finish), /*with_logprobs=*/false, size_t(3), got);
  EXPECT_EQ(got, api::Dump(expected));

  // Before any token: empty lists, a null finish_reason.
  NativeAnswer empty("r", 1);
  got.clear();
  empty.Serialize(RequestOutput{}, "null", /*with_logprobs=*/true, std::nullopt, got);
  const json none{{"text", ""}, {"output_ids", json::array()},
                  {"meta_info", {{"id", "r"}, {"finish_reason", nullptr}, {"prompt_tokens", 0},
                                 {"completion_tokens", 0}, {"cached_tokens", 0}, {"e2e_latency", 0.0},
                                 {"output_token_logprobs", json::array()}}}};
  EXPECT_EQ(got, api::Dump(none));
}

// --incremental-streaming-output: after ForgetSentOutput the next answer holds only what came
// since (SGLang's disjoint segments), with output_top_logprobs kept as an empty list, and the
// prompt's logprobs repeated as SGLang repeats them.
TEST(NativeAnswer, ForgetSentOutputLeavesOnlyTheNextSegment) {
  NativeAnswer answer("gen-2", 4);
  const json input = json::array({json::array({nullptr, 1, nullptr})});
  answer.SetInputLogprobs(api::Dump(input), std::nullopt);
  const json first = json::array({-0.5f, 11, nullptr}), second = json::array({-0.75f, 12, nullptr});
  answer.AppendText("ab");
  answer.AppendToken(TokenId(11));
  answer.AppendLogprob(api::Dump(first));
  answer.AppendTopLogprobs(api::Dump(json::array({first})));
  answer.ForgetSentOutput();

  RequestOutput o;
  o.prompt_tokens = 1;
  o.completion_tokens = 2;
  auto meta = [&](const json& logprobs, const json& tops) {
    return json{{"id", "gen-2"}, {"finish_reason", nullptr}, {"prompt_tokens", 1}, {"completion_tokens", 2},
                {"cached_tokens", 0}, {"e2e_latency", 0.0}, {"output_token_logprobs", logprobs},
                {"output_top_logprobs", tops}, {"input_token_logprobs", input}};
  };
  std::string got;
  answer.Serialize(o, "null", /*with_logprobs=*/true, std::nullopt, got);
  EXPECT_EQ(got, api::Dump(json{{"text", ""}, {"output_ids", json::array()},
                                {"meta_info", meta(json::array(), json::array())}}));

  answer.AppendText("c");
  answer.AppendToken(TokenId(12));
  answer.AppendLogprob(api::Dump(second));
  answer.AppendTopLogprobs(api::Dump(json::array({second})));
  got.clear();
  answer.Serialize(o, "null", /*with_logprobs=*/true, std::nullopt, got);
  EXPECT_EQ(got, api::Dump(json{{"text", "c"}, {"output_ids", {12}},
                                {"meta_info", meta(json::array({second}), json::array({json::array({second})}))}}));
}

}  // namespace
}  // namespace mlaserve
