// Issue 9 over the real server: hostile nesting never crashes it, server-made ids are
// unguessable, and every OpenAI / SGLang field either works (logit_bias, n, list prompts, echo,
// text_offset, batched /generate, return_text_in_logprobs) or is refused with a 400 naming it.
#include <gtest/gtest.h>

#include <bit>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "support/server_process.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::Get;
using testing::Post;
using testing::ServerProcess;
using testing::StreamEvents;

class ApiFieldsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess(); }
  static void TearDownTestSuite() { delete server_; }
  static ServerProcess* server_;

  static json PostJson(const std::string& path, const json& body, int expected_status = 200) {
    HttpResponse r = Post(*server_, path, body.dump());
    EXPECT_EQ(r.status_code, expected_status) << path << " " << body.dump().substr(0, 300) << " -> " << r.body;
    json j = json::parse(r.body, nullptr, false);
    return j.is_discarded() ? json() : j;
  }
  // A 400 whose message names `word`.
  static void ExpectRefused(const std::string& path, const json& body, const std::string& word) {
    const json j = PostJson(path, body, 400);
    EXPECT_NE(j.dump().find(word), std::string::npos) << body.dump() << " -> " << j.dump();
  }
};
ServerProcess* ApiFieldsTest::server_ = nullptr;

std::string Nested(size_t depth, const std::string& inner = "") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

// ---- item 1: nesting ---------------------------------------------------------------------------

TEST_F(ApiFieldsTest, DeeplyNestedValuesAreRefusedInEveryField) {
  ASSERT_TRUE(server_->running()) << server_->log();
  struct Place {
    const char* path;
    std::string before, after;  // the body is before + nested value + after
  };
  const Place places[] = {
      {"/v1/completions", R"({"prompt": )", "}"},
      {"/v1/completions", R"({"prompt": "x", "stop": )", "}"},
      {"/v1/completions", R"({"prompt": "x", "logit_bias": {"1": )", "}}"},
      {"/v1/completions", R"({"prompt": "x", "stream_options": )", "}"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": )", "}]}"},
      {"/v1/chat/completions", R"({"messages": )", "}"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "tools": )", "}"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "response_format": )", "}"},
      {"/generate", R"({"text": "x", "sampling_params": )", "}"},
      {"/generate", R"({"text": "x", "sampling_params": {"stop": )", "}}"},
      {"/generate", R"({"input_ids": )", "}"},
      {"/generate", R"({"text": )", "}"},
      {"/abort_request", R"({"rid": )", "}"},
      {"/generate", "", ""},  // the whole body
  };
  for (const size_t depth : {size_t(1000), size_t(100000), size_t(1000000)}) {
    for (const Place& place : places) {
      const std::string body = place.before + Nested(depth) + place.after;
      HttpResponse r = Post(*server_, place.path, body);
      EXPECT_EQ(r.status_code, 400) << place.path << " depth " << depth << ": " << r.body.substr(0, 200);
      EXPECT_NE(r.body.find("nested deeper than 64"), std::string::npos) << r.body.substr(0, 200);
      ASSERT_TRUE(server_->running()) << "the server died on " << place.path << " at depth " << depth;
    }
  }
  EXPECT_EQ(Get(*server_, "/health").status_code, 200);
  // Nesting within the bound is parsed as usual (and then judged on its content).
  const json ok = PostJson("/generate", json::parse(R"({"text": "ROMEO:", "sampling_params": {"max_new_tokens": 1}})"));
  EXPECT_EQ(ok["meta_info"]["completion_tokens"], 1);
}

// ---- item 2: ids ---------------------------------------------------------------------------------

std::string HexPart(const std::string& id, const std::string& prefix) {
  EXPECT_EQ(id.rfind(prefix, 0), 0u) << id;
  const std::string hex = id.substr(prefix.size());
  EXPECT_EQ(hex.size(), 32u) << id;
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  return hex;
}

// Bits that differ between two 128-bit hex strings.
int BitsApart(const std::string& a, const std::string& b) {
  int bits = 0;
  for (size_t i = 0; i + 16 <= a.size() && i + 16 <= b.size(); i += 16) {
    bits += std::popcount(std::stoull(a.substr(i, 16), nullptr, 16) ^ std::stoull(b.substr(i, 16), nullptr, 16));
  }
  return bits;
}

TEST_F(ApiFieldsTest, ServerMadeIdsAreRandom128Bit) {
  const json small{{"prompt", "ROMEO:"}, {"max_tokens", 1}};
  std::vector<std::string> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(HexPart(PostJson("/v1/completions", small)["id"], "cmpl-"));
  ids.push_back(HexPart(PostJson("/v1/chat/completions", json::parse(R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})"))["id"], "chatcmpl-"));
  ids.push_back(HexPart(PostJson("/generate", json::parse(R"({"text": "hi", "sampling_params": {"max_new_tokens": 1}})"))["meta_info"]["id"], "gen-"));
  std::set<std::string> prefixes;
  for (size_t i = 0; i < ids.size(); ++i) {
    prefixes.insert(ids[i].substr(0, 8));
    if (i == 0) continue;
    // Consecutive ids: about half their bits differ (a counter or a shared salt would not).
    const int apart = BitsApart(ids[i - 1], ids[i]);
    EXPECT_GE(apart, 24) << ids[i - 1] << " " << ids[i];
    EXPECT_LE(apart, 104) << ids[i - 1] << " " << ids[i];
  }
  EXPECT_EQ(prefixes.size(), ids.size()) << "two ids share their first 32 bits";
}

// ---- item 4: fields that work --------------------------------------------------------------------

TEST_F(ApiFieldsTest, LogitBiasForcesAndBansTokens) {
  json body{{"prompt", "ROMEO:"}, {"max_tokens", 6}, {"temperature", 0}};
  const json plain = PostJson("/v1/completions", body);
  body["logit_bias"] = {{"300", 100}};
  const json forced = PostJson("/v1/completions", body);
  // Every sampled token is 300: ask /generate for ids with the same bias.
  json native{{"text", "ROMEO:"}, {"sampling_params", {{"max_new_tokens", 6}, {"temperature", 0}, {"logit_bias", {{"300", 100}}}}}};
  const json forced_ids = PostJson("/generate", native)["output_ids"];
  ASSERT_EQ(forced_ids.size(), 6u);
  for (const json& id : forced_ids) EXPECT_EQ(id, 300);
  EXPECT_NE(forced["choices"][0]["text"], plain["choices"][0]["text"]);
  // Banning the greedy first token changes the first token.
  json first{{"text", "ROMEO:"}, {"sampling_params", {{"max_new_tokens", 1}, {"temperature", 0}}}};
  const int top = PostJson("/generate", first)["output_ids"][0];
  first["sampling_params"]["logit_bias"] = {{std::to_string(top), -100}};
  EXPECT_NE(PostJson("/generate", first)["output_ids"][0], top);
  // Bad biases are 400s naming the field.
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"logit_bias", {{"300", 101}}}}, "logit_bias");
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"logit_bias", {{"abc", 1}}}}, "logit_bias");
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"logit_bias", {{"99999999", 1}}}}, "logit_bias");
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"logit_bias", {{"-1", 1}}}}, "logit_bias");
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"logit_bias", {{"5", "high"}}}}, "logit_bias");
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"logprobs", -1}}, "logprobs");
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"logprobs", 21}}, "logprobs");
}

// A logit_bias key is the whole integer it spells: none wraps into the vocabulary (4294967596 is
// 300 mod 2^32), and every refusal quotes the key as sent, not a converted value.
TEST_F(ApiFieldsTest, LogitBiasKeysOutsideTheVocabularyAreRefusedAsWritten) {
  const int vocab = json::parse(Get(*server_, "/get_model_info").body)["vocab_size"];
  ASSERT_GT(vocab, 300);
  const std::string range = " is not a token id in [0, " + std::to_string(vocab) + ")";
  const std::vector<std::string> keys = {
      std::to_string(vocab), "2147483647", "2147483648", "4294967296", "4294967596", "9223372036854775807",
      "9223372036854775808", "18446744073709551916", "300000000000000000000000000000000000000", "-1",
      "-2147483648", "-4294967296", "-9223372036854775809", "abc", "3a", "1e3", " 5", "+5", "", "-"};
  for (const std::string& key : keys) {
    for (const bool native : {false, true}) {
      const json bias{{key, 1}};
      const json j = native ? PostJson("/generate", {{"text", "x"}, {"sampling_params", {{"logit_bias", bias}}}}, 400)
                            : PostJson("/v1/completions", {{"prompt", "x"}, {"logit_bias", bias}}, 400);
      EXPECT_NE(j.dump().find("'logit_bias' key '" + key + "'" + range), std::string::npos)
          << (native ? "/generate " : "/v1/completions ") << key << " -> " << j.dump();
    }
  }
  // The last token, leading zeros and a signed zero spell tokens.
  PostJson("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}, {"logit_bias", {{std::to_string(vocab - 1), 1}}}});
  PostJson("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}, {"logit_bias", {{"-0", 1}, {"000300", 1}}}});
}

int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

TEST_F(ApiFieldsTest, CompletionLogprobsHaveTextOffsets) {
  const json j = PostJson("/v1/completions", {{"prompt", "JULIET:"}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 2}});
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object() && lp.contains("text_offset")) << j.dump();
  ASSERT_EQ(lp["text_offset"].size(), 12u) << lp.dump();
  std::string joined;
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(lp["text_offset"][i], CodePoints(joined)) << i;
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, j["choices"][0]["text"]);
}

TEST_F(ApiFieldsTest, NSamplesShareThePromptsPrefixCache) {
  // A prompt of several KV pages that no other test sends.
  std::string prompt = "NSamples: ";
  for (int i = 0; i < 12; ++i) prompt += "Now is the winter of our discontent " + std::to_string(i) + ". ";
  json body{{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 1.0}, {"seed", 11}, {"n", 3}};
  const json j = PostJson("/v1/completions", body);
  ASSERT_EQ(j["choices"].size(), 3u) << j.dump();
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    texts.insert(j["choices"][i]["text"].get<std::string>());
  }
  EXPECT_GT(texts.size(), 1u) << "n samples with one seed must still differ";
  const int prompt_tokens = j["usage"]["prompt_tokens"];
  EXPECT_GT(prompt_tokens, 64);
  // The prompt was computed once and served to the samples from the prefix cache.
  EXPECT_GE(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), prompt_tokens - 16) << j["usage"].dump();
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
  // Sample 0 is the draw the same request makes with n = 1.
  body["n"] = 1;
  EXPECT_EQ(PostJson("/v1/completions", body)["choices"][0]["text"], j["choices"][0]["text"]);
  // Chat takes n too, streamed: each choice's events carry its index.
  const auto events = StreamEvents(*server_, "/v1/chat/completions",
                                   R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "n": 2, "stream": true})");
  std::set<int> finished;
  for (const std::string& e : events) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    for (const json& c : chunk["choices"]) {
      if (!c["finish_reason"].is_null()) finished.insert(c["index"].get<int>());
    }
  }
  EXPECT_EQ(finished, (std::set<int>{0, 1}));
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST_F(ApiFieldsTest, AListOfPromptsGivesIndependentChoices) {
  const json a = PostJson("/v1/completions", {{"prompt", "ROMEO:"}, {"max_tokens", 6}, {"temperature", 0}});
  const json b = PostJson("/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 6}, {"temperature", 0}});
  const json both = PostJson("/v1/completions", {{"prompt", {json("ROMEO:"), json({1, 2, 3})}}, {"max_tokens", 6}, {"temperature", 0}});
  ASSERT_EQ(both["choices"].size(), 2u) << both.dump();
  EXPECT_EQ(both["choices"][0]["index"], 0);
  EXPECT_EQ(both["choices"][1]["index"], 1);
  EXPECT_EQ(both["choices"][0]["text"], a["choices"][0]["text"]);
  EXPECT_EQ(both["choices"][1]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(both["usage"]["prompt_tokens"], a["usage"]["prompt_tokens"].get<int>() + 3);
  EXPECT_EQ(both["usage"]["completion_tokens"], 12);
}

TEST_F(ApiFieldsTest, EchoReturnsThePromptAndItsLogprobs) {
  const json plain = PostJson("/v1/completions", {{"prompt", "ROMEO:"}, {"max_tokens", 5}, {"temperature", 0}});
  const json j = PostJson("/v1/completions", {{"prompt", "ROMEO:"}, {"max_tokens", 5}, {"temperature", 0}, {"echo", true}, {"logprobs", 1}});
  const json& choice = j["choices"][0];
  EXPECT_EQ(choice["text"], "ROMEO:" + plain["choices"][0]["text"].get<std::string>());
  const int prompt_tokens = j["usage"]["prompt_tokens"];
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), size_t(prompt_tokens + 5)) << lp.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());  // the first prompt token has no context
  // The prompt's logprobs are /generate's input_token_logprobs.
  const json native = PostJson("/generate", {{"text", "ROMEO:"}, {"return_logprob", true}, {"logprob_start_len", 0},
                                             {"sampling_params", {{"max_new_tokens", 1}, {"temperature", 0}}}});
  const json& in = native["meta_info"]["input_token_logprobs"];
  ASSERT_EQ(in.size(), size_t(prompt_tokens));
  for (int i = 1; i < prompt_tokens; ++i) EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), in[i][0].get<double>(), 1e-5);
  // Offsets index the echoed text (a special BOS token covers no characters).
  const json& offsets = lp["text_offset"];
  EXPECT_EQ(offsets.back().get<int64_t>() + CodePoints(lp["tokens"].back()), CodePoints(choice["text"]));
  // echo without logprobs, streamed: the prompt comes first.
  const auto events = StreamEvents(*server_, "/v1/completions", R"({"prompt": "ROMEO:", "max_tokens": 3, "echo": true, "stream": true})");
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(json::parse(events[0])["choices"][0]["text"].get<std::string>().rfind("ROMEO:", 0), 0u) << events[0];
}

TEST_F(ApiFieldsTest, BatchedGenerateReturnsAList) {
  const json params{{"max_new_tokens", 5}, {"temperature", 0}};
  const json one = PostJson("/generate", {{"text", "ROMEO:"}, {"sampling_params", params}});
  const json two = PostJson("/generate", {{"text", "JULIET:"}, {"sampling_params", params}});
  const json batch = PostJson("/generate", {{"text", {"ROMEO:", "JULIET:"}}, {"sampling_params", params}});
  ASSERT_TRUE(batch.is_array()) << batch.dump();
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0]["text"], one["text"]);
  EXPECT_EQ(batch[1]["text"], two["text"]);
  const json ids_batch = PostJson("/generate", {{"input_ids", {one["output_ids"], two["output_ids"]}}, {"sampling_params", params}});
  ASSERT_TRUE(ids_batch.is_array() && ids_batch.size() == 2u) << ids_batch.dump();
  // Per-prompt sampling_params and rids.
  const json per = PostJson("/generate", {{"text", {"ROMEO:", "JULIET:"}}, {"rid", {"my-a", "my-b"}},
                                          {"sampling_params", {{{"max_new_tokens", 2}}, {{"max_new_tokens", 3}}}}});
  ASSERT_EQ(per.size(), 2u) << per.dump();
  EXPECT_EQ(per[0]["meta_info"]["completion_tokens"], 2);
  EXPECT_EQ(per[1]["meta_info"]["completion_tokens"], 3);
  EXPECT_EQ(per[0]["meta_info"]["id"], "my-a");
  // sampling_params.n: n results for one prompt.
  const json n = PostJson("/generate", {{"text", "ROMEO:"}, {"sampling_params", {{"max_new_tokens", 4}, {"n", 3}}}});
  ASSERT_TRUE(n.is_array() && n.size() == 3u) << n.dump();
  // Streamed batch: each event names its index.
  const auto events = StreamEvents(*server_, "/generate",
                                   R"({"text": ["ROMEO:", "JULIET:"], "stream": true, "sampling_params": {"max_new_tokens": 3}})");
  std::set<int> seen;
  for (const std::string& e : events) {
    if (e != "[DONE]") seen.insert(json::parse(e)["index"].get<int>());
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1}));
  ExpectRefused("/generate", {{"text", {"a", "b"}}, {"sampling_params", {{{"max_new_tokens", 2}}}}}, "one entry per prompt");
  ExpectRefused("/generate", {{"text", {"a", "b"}}, {"rid", "single"}}, "rid");
  ExpectRefused("/generate", {{"text", {"a", "b"}}, {"rid", {"same", "same"}}}, "'same' twice");
  ExpectRefused("/generate", {{"text", "x"}, {"sampling_params", {{"n", 0}}}}, "'n'");
  ExpectRefused("/generate", {{"text", "x"}, {"sampling_params", {{"n", 129}}}}, "'n'");
  ExpectRefused("/generate", {{"text", {"a", "b"}}, {"sampling_params", {{"n", 65}}}}, "'n'");  // 130 in all
  ExpectRefused("/v1/completions", {{"prompt", {"a", "b"}}, {"n", 65}}, "'n'");
}

TEST_F(ApiFieldsTest, ReturnTextInLogprobsFillsTheTextElement) {
  const json j = PostJson("/generate", {{"text", "ROMEO:"}, {"return_logprob", true}, {"return_text_in_logprobs", true},
                                        {"top_logprobs_num", 2}, {"sampling_params", {{"max_new_tokens", 4}, {"temperature", 0}}}});
  const json& lp = j["meta_info"]["output_token_logprobs"];
  ASSERT_EQ(lp.size(), 4u);
  std::string joined;
  for (const json& e : lp) {
    ASSERT_TRUE(e[2].is_string()) << e.dump();
    joined += e[2].get<std::string>();
  }
  EXPECT_EQ(joined, j["text"]);
  EXPECT_TRUE(j["meta_info"]["output_top_logprobs"][0][0][2].is_string());
  // Without it the element stays null, as in SGLang.
  const json plain = PostJson("/generate", {{"text", "ROMEO:"}, {"return_logprob", true}, {"sampling_params", {{"max_new_tokens", 1}}}});
  EXPECT_TRUE(plain["meta_info"]["output_token_logprobs"][0][2].is_null());
}

// ---- item 4: fields that are refused --------------------------------------------------------------

TEST_F(ApiFieldsTest, UnimplementedFieldsAreRefusedByName) {
  const json chat_base = json::parse(R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})");
  auto chat = [&](const char* key, const json& value) {
    json b = chat_base;
    b[key] = value;
    return b;
  };
  ExpectRefused("/v1/chat/completions", chat("response_format", {{"type", "json_object"}}), "response_format");
  ExpectRefused("/v1/chat/completions", chat("response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}), "response_format");
  ExpectRefused("/v1/chat/completions", chat("tools", json::parse(R"([{"type": "function", "function": {"name": "f"}}])")), "tools");
  ExpectRefused("/v1/chat/completions", chat("tool_choice", "required"), "tool_choice");
  ExpectRefused("/v1/chat/completions", chat("reasoning_effort", "low"), "reasoning_effort");
  ExpectRefused("/v1/chat/completions", chat("no_such_field", 1), "no_such_field");
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"suffix", "y"}}, "suffix");
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"response_format", {{"type", "json_object"}}}}, "response_format");
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"max_token", 5}}, "max_token");
  ExpectRefused("/v1/chat/completions", json::parse(R"({"messages": [{"role": "user", "content": "hi", "tool_calls": []}]})"), "tool_calls");
  // The default-valued forms are accepted.
  PostJson("/v1/chat/completions", chat("response_format", {{"type", "text"}}));
  PostJson("/v1/chat/completions", chat("tools", json::array()));
  PostJson("/v1/chat/completions", chat("tool_choice", "none"));
  PostJson("/v1/chat/completions", chat("tool_choice", "auto"));
  PostJson("/v1/chat/completions", chat("separate_reasoning", true));
  // /generate: a typo in sampling_params is named, not turned into the default 128 tokens.
  ExpectRefused("/generate", {{"text", "x"}, {"sampling_params", {{"max_new_token", 3}}}}, "max_new_token");
  ExpectRefused("/generate", {{"text", "x"}, {"sampling_params", {{"regex", "[a-z]+"}}}}, "regex");
  ExpectRefused("/generate", {{"text", "x"}, {"sampling_params", {{"json_schema", "{}"}}}}, "json_schema");
  ExpectRefused("/generate", {{"text", "x"}, {"image_data", "x.png"}}, "image_data");
  ExpectRefused("/generate", {{"text", "x"}, {"lora_path", "a"}}, "lora_path");
  ExpectRefused("/generate", {{"text", "x"}, {"bogus", true}}, "bogus");
  ExpectRefused("/abort_request", {{"rid", "x"}, {"extra", 1}}, "extra");
  // A content part carries OpenAI's keys only: anything beside them is named, as a message's own
  // unknown keys are.
  ExpectRefused("/v1/chat/completions",
                json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "foo": 1}]}]})"),
                "messages[0]: content[0]: unknown field 'foo'");
  ExpectRefused("/v1/chat/completions",
                json::parse(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": [)"
                            R"({"type": "text", "text": "x"}, {"type": "text", "text": "y", "cache_control": {"type": "ephemeral"}}]}]})"),
                "messages[1]: content[1]: unknown field 'cache_control'");
  PostJson("/v1/chat/completions",
           json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, {"text": "y", "type": "text"}]}], "max_tokens": 1})"));
  // Image inputs: refused by name (a multimodal checkpoint is served without its vision tower).
  ExpectRefused("/v1/chat/completions",
                json::parse(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]})"),
                "'image_url' content parts are not supported");
  ExpectRefused("/v1/chat/completions",
                json::parse(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,", "detail": "low"}}]}]})"),
                "'image_url' content parts are not supported");
  // Options that would have no effect without the option they refine.
  ExpectRefused("/v1/completions", {{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}, "stream_options");
  ExpectRefused("/v1/chat/completions", chat("top_logprobs", 2), "top_logprobs");
  ExpectRefused("/generate", {{"text", "x"}, {"top_logprobs_num", 2}}, "top_logprobs_num");
}

}  // namespace
}  // namespace mlaserve
