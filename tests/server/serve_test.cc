// The real server binary on the bundled model, over loopback: every endpoint, streaming, bad
// inputs, disconnects, API keys, graceful drain, and load (hundreds of streams, a slowloris).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <regex>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "server/http_client.h"
#include "server/sse.h"
#include "support/prometheus_text.h"
#include "support/run_binary.h"
#include "support/server_process.h"
#include "tokenizer/unicode_version.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::TempDir;

const std::string kModel = testing::BundledModelPath();

using testing::Get;
using testing::Post;
using testing::ServerProcess;
using testing::StreamEvents;

// Reads /metrics, strictly parsed, until `done` holds for it (30 s at most); returns the last page.
std::vector<testing::PromFamily> WaitForMetrics(const ServerProcess& s,
                                                const std::function<bool(const std::vector<testing::PromFamily>&)>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    const std::string page = Get(s, "/metrics").body;
    auto families = testing::ParsePrometheusText(page);
    EXPECT_TRUE(families.ok()) << families.error() << "\n" << page;
    if (!families.ok()) return {};
    if (done(*families) || std::chrono::steady_clock::now() > deadline) return std::move(families).value();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The value of a gauge or counter, or a histogram's _count (its last sample); -1 when absent.
double MetricValue(const std::vector<testing::PromFamily>& families, const std::string& name) {
  const testing::PromFamily* f = testing::FindFamily(families, name);
  return f == nullptr || f->samples.empty() ? -1 : f->samples.back().value;
}

// Nothing running or queued. A client can hold its whole response a moment before the engine
// retires the request, so a gauge that must fall back to 0 is waited for, not read once.
bool NothingRunning(const std::vector<testing::PromFamily>& m) {
  return MetricValue(m, "sglang:num_running_reqs") == 0 && MetricValue(m, "sglang:num_queue_reqs") == 0;
}

// The number after `prefix` in `text`, or -1.
int64_t NumberAfter(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  return at == std::string::npos ? -1 : std::strtoll(text.c_str() + at + prefix.size(), nullptr, 10);
}

class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess({"--enable-metrics"}); }
  static void TearDownTestSuite() { delete server_; }
  static ServerProcess* server_;
};
ServerProcess* ServeTest::server_ = nullptr;

TEST_F(ServeTest, StartsAndLogsLikeSglang) {
  ASSERT_TRUE(server_->running()) << server_->log();
  const std::string log = server_->log();
  EXPECT_NE(log.find("max_total_num_tokens=8192"), std::string::npos) << log;
  EXPECT_NE(log.find("kv_cache_dtype=bf16"), std::string::npos) << log;
  EXPECT_NE(log.find("context_len="), std::string::npos) << log;
  // SGLang's load line, its memory from /proc/meminfo.
  const size_t load = log.find("Load weight end. elapsed=");
  ASSERT_NE(load, std::string::npos) << log;
  const std::string avail = "type=deepseek_v3, dtype=bfloat16, avail mem=";
  const size_t at = log.find(avail, load);
  ASSERT_NE(at, std::string::npos) << log;
  // Read from /proc/meminfo ("unknown" where it cannot be): some memory is always available.
  EXPECT_GT(std::strtod(log.c_str() + at + avail.size(), nullptr), 0.0) << log;
  EXPECT_NE(log.find(" GB, mem usage=", at), std::string::npos) << log;
  EXPECT_EQ(Get(*server_, "/health").status_code, 200);
  auto models = json::parse(Get(*server_, "/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], "bard");
  auto info = json::parse(Get(*server_, "/get_model_info").body);
  EXPECT_EQ(info["is_generation"], true);
  auto server_info = json::parse(Get(*server_, "/get_server_info").body);
  EXPECT_EQ(server_info["max_total_num_tokens"], 8192);
  // Test servers run with --enable-deterministic-inference (ServerLaunch::deterministic).
  EXPECT_EQ(server_info["enable_deterministic_inference"], true);
  EXPECT_NE(log.find("enable_deterministic_inference=true"), std::string::npos) << log;
}

// Which Unicode tables the tokenizer's classes follow is in the start-up log (once) and in
// /get_server_info; the warning appears only when they are not the tested version's.
TEST_F(ServeTest, ReportsTheTokenizersUnicodeVersion) {
  const std::string log = server_->log();
  const std::string line = "[mlaserve] tokenizer: Unicode " + TokenizerUnicodeVersion() + " (libpcre2 ";
  const size_t at = log.find(line);
  EXPECT_NE(at, std::string::npos) << log;
  EXPECT_EQ(log.find("[mlaserve] tokenizer: Unicode", at + 1), std::string::npos) << log;
  const bool tested = TokenizerUnicodeVersion() == kTestedUnicodeVersion;
  EXPECT_EQ(log.find("warning: the tokenizer's character classes") == std::string::npos, tested) << log;
  auto server_info = json::parse(Get(*server_, "/get_server_info").body);
  EXPECT_EQ(server_info["tokenizer_unicode_version"], TokenizerUnicodeVersion());
}

TEST_F(ServeTest, NativeGenerateMatchesTheCli) {
  auto r = Post(*server_, "/generate",
                R"({"text": "ROMEO:", "sampling_params": {"max_new_tokens": 24, "temperature": 0}})");
  ASSERT_EQ(r.status_code, 200) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["output_ids"].size(), 24u);
  EXPECT_EQ(j["meta_info"]["completion_tokens"], 24);
  EXPECT_EQ(j["meta_info"]["finish_reason"]["type"], "length");
  EXPECT_GT(j["meta_info"]["prompt_tokens"].get<int>(), 1);
  // The CLI runs the same model alone: greedy text must be identical (batch invariance).
  auto cli = testing::RunMlaserve("generate --model-path " + testing::ShellQuote(kModel) +
                                  " --prompt 'ROMEO:' --max-new-tokens 24 --enable-deterministic-inference");
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ("ROMEO:" + j["text"].get<std::string>() + "\n", cli.out);

  auto events = StreamEvents(*server_, "/generate",
                             R"({"text": "ROMEO:", "stream": true, "sampling_params": {"max_new_tokens": 24, "temperature": 0}})");
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  auto last = json::parse(events[events.size() - 2]);
  EXPECT_EQ(last["text"], j["text"]);
  EXPECT_EQ(last["meta_info"]["finish_reason"]["type"], "length");
}

TEST_F(ServeTest, InputLogprobsMatchScore) {
  const std::vector<int> ids = {2042, 82, 77, 77, 69, 79, 58, 10, 84, 104, 111, 117, 32};
  json body{{"input_ids", ids}, {"return_logprob", true}, {"logprob_start_len", 0}, {"top_logprobs_num", 2},
            {"sampling_params", {{"max_new_tokens", 1}, {"temperature", 0}}}};
  auto r = Post(*server_, "/generate", body.dump());
  ASSERT_EQ(r.status_code, 200) << r.body;
  auto j = json::parse(r.body);
  const json& in = j["meta_info"]["input_token_logprobs"];
  ASSERT_EQ(in.size(), ids.size()) << r.body;
  EXPECT_TRUE(in[0][0].is_null());
  EXPECT_EQ(j["meta_info"]["input_top_logprobs"][1].size(), 2u);
  std::string list;
  for (size_t i = 0; i < ids.size(); ++i) list += (i ? "," : "") + std::to_string(ids[i]);
  // Both deterministic (the server is): the same kernel table whatever a product's token count
  // (kernels/kernel_choice.h), so the two agree to the order of additions.
  auto score = testing::RunMlaserve("score --enable-deterministic-inference --model-path " +
                                    testing::ShellQuote(kModel) + " --input-ids " + list);
  ASSERT_EQ(score.exit_code, 0) << score.err;
  auto expected = json::parse(score.out)["token_logprobs"];
  for (size_t i = 1; i < ids.size(); ++i) {
    EXPECT_EQ(in[i][1], ids[i]);
    EXPECT_NEAR(in[i][0].get<double>(), expected[i].get<double>(), 1e-4) << i;
  }
  // A prompt longer than one logprob chunk (64 tokens) is computed over several steps.
  std::vector<int> long_ids;
  for (int i = 0; i < 150; ++i) long_ids.push_back(10 + (i * 37) % 1900);
  json long_body{{"input_ids", long_ids}, {"return_logprob", true}, {"logprob_start_len", 0},
                 {"sampling_params", {{"max_new_tokens", 2}, {"temperature", 0}}}};
  auto long_r = json::parse(Post(*server_, "/generate", long_body.dump()).body);
  const json& long_in = long_r["meta_info"]["input_token_logprobs"];
  ASSERT_EQ(long_in.size(), long_ids.size());
  std::string long_list;
  for (size_t i = 0; i < long_ids.size(); ++i) long_list += (i ? "," : "") + std::to_string(long_ids[i]);
  auto long_score = json::parse(testing::RunMlaserve("score --enable-deterministic-inference --model-path " +
                                                     testing::ShellQuote(kModel) +
                                                     " --input-ids " + long_list).out)["token_logprobs"];
  for (size_t i : {1u, 63u, 64u, 65u, 100u, 149u}) {
    EXPECT_NEAR(long_in[i][0].get<double>(), long_score[i].get<double>(), 1e-4) << i;
  }

  // From a later start, only that suffix comes back.
  body["logprob_start_len"] = 5;
  auto suffix = json::parse(Post(*server_, "/generate", body.dump()).body);
  ASSERT_EQ(suffix["meta_info"]["input_token_logprobs"].size(), ids.size() - 5);
  EXPECT_NEAR(suffix["meta_info"]["input_token_logprobs"][0][0].get<double>(), expected[5].get<double>(), 1e-4);
}

TEST_F(ServeTest, OpenAiCompletionsAndChat) {
  auto r = Post(*server_, "/v1/completions",
                R"({"model": "bard", "prompt": "JULIET:", "max_tokens": 12, "temperature": 0, "logprobs": 2})");
  ASSERT_EQ(r.status_code, 200) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"].size(), 12u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);

  auto events = StreamEvents(*server_, "/v1/chat/completions",
                             R"({"model": "bard", "messages": [{"role": "user", "content": "Speak."}],
                                 "max_tokens": 10, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  auto usage = json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 10);
  auto first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
}

TEST_F(ServeTest, BadInputsGetJsonErrorsAndTheServerCarriesOn) {
  struct Case {
    std::string path, body;
    int status;
    std::string needle;
  };
  const std::string long_prompt(20000, 'a');
  const std::vector<Case> cases = {
      {"/v1/completions", "{not json", 400, "not valid JSON"},
      {"/v1/completions", "[1,2]", 400, "must be a JSON object"},
      {"/v1/completions", R"({"model": "gpt-9", "prompt": "x"})", 404, "does not exist"},
      {"/v1/completions", R"({"model": "bard"})", 400, "'prompt' is required"},
      {"/v1/completions", R"({"prompt": ""})", 400, "empty"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": -5})", 400, "max_new_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "many"})", 400, "'max_tokens' must be an integer"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 7})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 100000000})", 400, "context length"},
      {"/v1/completions", "{\"prompt\": \"" + long_prompt + "\"}", 400, "context length"},
      {"/v1/completions", "{\"prompt\": \"\xff\xfe\"}", 400, "not valid JSON"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "'messages'"},
      {"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "wizard"},
      {"/generate", R"({"input_ids": [1, 999999]})", 400, "outside the vocabulary"},
      {"/generate", R"({"input_ids": [4294967297, 4294967298]})", 400, "'input_ids' item 4294967297 is outside the vocabulary"},
      {"/generate", R"({"input_ids": [[1], [1, -2147483649]]})", 400, "'input_ids[1]' item -2147483649 is outside the vocabulary"},
      {"/generate", R"({"text": "x", "sampling_params": {"stop_token_ids": [1, 4294967296]}})", 400,
       "'stop_token_ids' item 4294967296 is outside the vocabulary"},
      {"/v1/completions", R"({"prompt": [9223372036854775807]})", 400, "'prompt' item 9223372036854775807 is outside the vocabulary"},
      {"/v1/completions", R"({"prompt": "x", "stop_token_ids": [18446744073709551615]})", 400,
       "'stop_token_ids' item 18446744073709551615 is outside the vocabulary"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 4294967297})", 400, "top_logprobs"},
      {"/generate", R"({})", 400, "exactly one of"},
      {"/nope", "{}", 404, "no route"},
      {"/v1/completions", R"({"prompt": "x", "stream": "yes"})", 400, "'stream' must be true or false"},
      {"/v1/completions", R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})", 400, "include_usage"},
      {"/v1/completions", R"({"prompt": "x", "echo": "no"})", 400, "'echo'"},
      {"/generate", R"({"text": "x", "return_logprob": "y"})", 400, "'return_logprob'"},
      {"/generate", R"({"text": "x", "top_logprobs_num": 1.5})", 400, "'top_logprobs_num'"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": 5}]}]})", 400, "text content"},
  };
  for (const Case& c : cases) {
    auto r = Post(*server_, c.path, c.body);
    EXPECT_EQ(r.status_code, c.status) << c.path << " " << c.body.substr(0, 80) << " -> " << r.body;
    auto j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.needle), std::string::npos) << r.body;
  }
  auto big = Post(*server_, "/v1/completions", std::string(20 << 20, ' '));
  EXPECT_EQ(big.status_code, 413);
  EXPECT_EQ(Get(*server_, "/health").status_code, 200);
}

TEST_F(ServeTest, DisconnectMidStreamAbortsAndFreesKv) {
  int chunks = 0;
  Status s = HttpClient().Stream("POST", server_->Url("/generate"),
                                 R"({"text": "KING:", "stream": true, "sampling_params": {"max_new_tokens": 1500, "ignore_eos": true}})",
                                 {}, 30000, [&](std::string_view) { return ++chunks < 3; });
  EXPECT_TRUE(s.ok()) << s.message();
  // The server notices, aborts the request and frees its KV.
  EXPECT_TRUE(NothingRunning(WaitForMetrics(*server_, NothingRunning))) << Get(*server_, "/metrics").body;
  const std::string m = Get(*server_, "/metrics").body;
  EXPECT_NE(m.find("sglang:time_to_first_token_seconds_bucket"), std::string::npos);
  EXPECT_NE(m.find("sglang:e2e_request_latency_seconds_count"), std::string::npos);
}

TEST_F(ServeTest, OfficialOpenAiNodeClient) {
  const auto r = testing::RunNodeScript("openai_client.mjs", {server_->Url(""), "bard"});
  if (!r) GTEST_SKIP() << "node or the openai package is missing (scripts/setup.sh installs them)";
  EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
  EXPECT_NE(r->out.find("OK:"), std::string::npos) << r->out << r->err;
}

TEST_F(ServeTest, HealthGenerateAndFlush) {
  EXPECT_EQ(Get(*server_, "/health_generate").status_code, 200);
  // A cached prefix is reused, then flushed.
  const std::string body = R"({"text": "To be, or not to be, that is the question: whether 'tis nobler in the mind",
                               "sampling_params": {"max_new_tokens": 4, "temperature": 0}})";
  ASSERT_EQ(Post(*server_, "/generate", body).status_code, 200);
  auto again = json::parse(Post(*server_, "/generate", body).body);
  const int cached = again["meta_info"]["cached_tokens"].get<int>();
  EXPECT_GT(cached, 0);
  // The answer comes once the engine has flushed, and says how much it freed: at least the
  // prefix the second request reused, in whole 16-token pages.
  auto flush = Post(*server_, "/flush_cache", "");
  EXPECT_EQ(flush.status_code, 200) << flush.body;
  const int64_t freed = NumberAfter(flush.body, "Cache flushed. Freed ");
  EXPECT_GE(freed, cached) << flush.body;
  EXPECT_EQ(freed % 16, 0) << flush.body;
  auto flushed = json::parse(Post(*server_, "/generate", body).body);
  EXPECT_EQ(flushed["meta_info"]["cached_tokens"], 0);

}

// /abort_request ends a request with finish_reason abort. The server runs one request at a time,
// so the victim waits behind a long request and cannot finish before the abort however slowly
// the test runs (aborting a running request instead raced its 1900 tokens on a loaded machine).
TEST(ServeAbort, AbortRequestEndsTheRequestItNames) {
  ServerProcess server({"--max-running-requests", "1"});
  const auto generate = [&](const std::string& rid, json& result) {
    return std::thread([&server, rid, &result] {
      auto r = HttpClient().Request("POST", server.Url("/generate"),
                                    R"({"rid": ")" + rid + R"(", "text": "KING:", "sampling_params": )"
                                    R"({"max_new_tokens": 1900, "ignore_eos": true}})",
                                    {}, 60000);
      if (r.ok()) result = json::parse(r->body, nullptr, false);
    });
  };
  json blocker_result, victim_result;
  std::thread blocker = generate("blocker", blocker_result);
  ASSERT_TRUE(testing::WaitForRunningRequests(server)) << "the blocker never started";
  std::thread victim = generate("victim", victim_result);
  ASSERT_TRUE(testing::WaitForQueuedRequests(server)) << "the victim never queued";
  EXPECT_EQ(Post(server, "/abort_request", R"({"rid": "victim"})").status_code, 200);
  victim.join();
  // Aborting the blocker only ends the test sooner; whether it finished first is a race.
  Post(server, "/abort_request", R"({"rid": "blocker"})");
  blocker.join();
  ASSERT_TRUE(victim_result.is_object());
  EXPECT_EQ(victim_result["meta_info"]["finish_reason"]["type"], "abort") << victim_result.dump();
  EXPECT_LT(victim_result["meta_info"]["completion_tokens"].get<int>(), 1900);
}

// An OpenAI client holds only the response's id ("cmpl-...", "chatcmpl-..."): /abort_request
// takes it and aborts every choice of that response (SGLang's users abort by the id they were
// given). The server runs one request at a time and each response has two choices, so the
// second waits behind the first, whose streamed first event gives the id: the second cannot
// finish before the abort unless both ran their 1900 tokens first.
TEST(ServeAbort, AbortRequestTakesTheIdAnOpenAiResponseCarries) {
  ServerProcess server({"--max-running-requests", "1"});
  ASSERT_TRUE(server.running()) << server.log();
  struct Case {
    const char* path;
    json body;
    const char* prefix;
  };
  const Case cases[] = {
      {"/v1/completions",
       {{"prompt", {"KING:", "QUEEN:"}}, {"max_tokens", 1900}, {"ignore_eos", true}, {"stream", true}},
       "cmpl-"},
      {"/v1/chat/completions",
       {{"messages", {{{"role", "user"}, {"content", "Speak, king."}}}},
        {"n", 2},
        {"max_tokens", 1900},
        {"ignore_eos", true},
        {"stream", true}},
       "chatcmpl-"},
  };
  for (const Case& c : cases) {
    SseParser parser;
    std::string id;
    int abort_status = 0;
    std::map<int, std::string> finish_reasons;  // choice index -> its last finish_reason
    const Status st = HttpClient().Stream("POST", server.Url(c.path), c.body.dump(), {}, 60000, [&](std::string_view piece) {
      parser.Feed(piece, [&](const SseEvent& e) {
        if (e.data == "[DONE]") return;
        const json event = json::parse(e.data, nullptr, false);
        ASSERT_TRUE(event.is_object()) << e.data;
        for (const json& choice : event["choices"]) {
          if (choice["finish_reason"].is_string()) finish_reasons[choice["index"].get<int>()] = choice["finish_reason"];
        }
        if (!id.empty()) return;
        // The first event: the response is in flight, and the client now has its id.
        id = event["id"];
        abort_status = Post(server, "/abort_request", json{{"rid", id}}.dump()).status_code;
      });
      return true;
    });
    ASSERT_TRUE(st.ok()) << c.path << ": " << st.message();
    EXPECT_EQ(id.rfind(c.prefix, 0), 0u) << id;
    EXPECT_EQ(abort_status, 200) << c.path;
    // The choice that waited is aborted; the running one too, unless it finished first.
    EXPECT_EQ(finish_reasons[1], "abort") << c.path << " " << id;
    EXPECT_TRUE(finish_reasons[0] == "abort" || finish_reasons[0] == "length") << finish_reasons[0];
    // Once the response has ended its id names nothing: 200, as SGLang answers an unknown rid.
    EXPECT_EQ(Post(server, "/abort_request", json{{"rid", id}}.dump()).status_code, 200);
  }
  EXPECT_EQ(Get(server, "/health").status_code, 200);
}

TEST_F(ServeTest, FlushCacheIsRefusedWhileARequestRunsAndFreesNothing) {
  const std::string text = "To be, or not to be, that is the question: whether 'tis nobler in the mind";
  const json warm{{"text", text}, {"sampling_params", {{"max_new_tokens", 4}, {"temperature", 0}}}};
  ASSERT_EQ(Post(*server_, "/generate", warm.dump()).status_code, 200);

  // A long generation of the same prompt borrows the cached prefix; the client leaves when told.
  std::mutex mu;
  std::condition_variable cv;
  int first_cached_tokens = -1;
  bool leave = false;
  std::thread client([&] {
    const json body{{"text", text}, {"stream", true},
                    {"sampling_params", {{"max_new_tokens", 1900}, {"ignore_eos", true}}}};
    SseParser parser;
    Status st = HttpClient().Stream("POST", server_->Url("/generate"), body.dump(), {}, 60000, [&](std::string_view piece) {
      parser.Feed(piece, [&](const SseEvent& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_cached_tokens >= 0 || e.data == "[DONE]") return;
        first_cached_tokens = json::parse(e.data)["meta_info"]["cached_tokens"].get<int>();
        cv.notify_all();
      });
      std::lock_guard<std::mutex> lock(mu);
      return !leave;
    });
    EXPECT_TRUE(st.ok()) << st.message();
  });
  auto leave_now = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      leave = true;
    }
    client.join();
  };
  bool started = false;
  {
    std::unique_lock<std::mutex> lock(mu);
    started = cv.wait_for(lock, std::chrono::seconds(30), [&] { return first_cached_tokens >= 0; });
  }
  if (!started) {
    leave_now();
    FAIL() << "the long generation never streamed";
  }
  EXPECT_GT(first_cached_tokens, 0);

  // SGLang's answer (400, "Cache not flushed ..."), with the numbers; nothing is freed.
  auto refused = Post(*server_, "/flush_cache", "");
  EXPECT_EQ(refused.status_code, 400) << refused.body;
  EXPECT_NE(refused.body.find("Cache not flushed because there are pending requests. #queue-req: 0, #running-req: 1."),
            std::string::npos) << refused.body;
  const int64_t stayed = NumberAfter(refused.body, "Nothing was freed: ");
  const int64_t in_use = NumberAfter(refused.body, " cached tokens stay, ");
  EXPECT_GE(in_use, first_cached_tokens) << refused.body;
  EXPECT_GE(stayed, in_use) << refused.body;
  auto still_cached = json::parse(Post(*server_, "/generate", warm.dump()).body);
  EXPECT_GT(still_cached["meta_info"]["cached_tokens"].get<int>(), 0);

  leave_now();
  // Once the server has aborted the request, the flush goes through and frees the prefix.
  const auto idle = WaitForMetrics(*server_, NothingRunning);
  EXPECT_EQ(MetricValue(idle, "sglang:num_running_reqs"), 0);
  auto flush = Post(*server_, "/flush_cache", "");
  EXPECT_EQ(flush.status_code, 200) << flush.body;
  EXPECT_GE(NumberAfter(flush.body, "Cache flushed. Freed "), stayed) << flush.body;
  auto after = json::parse(Post(*server_, "/generate", warm.dump()).body);
  EXPECT_EQ(after["meta_info"]["cached_tokens"], 0);
}

TEST_F(ServeTest, FuzzedRequestsLeaveItUpAndLeakFree) {
  std::mt19937 rng(5);
  const std::vector<std::string> seeds = {
      R"({"prompt": "x", "max_tokens": 3})", R"({"text": "y", "sampling_params": {"max_new_tokens": 2}})",
      R"({"messages": [{"role": "user", "content": "z"}], "max_tokens": 2, "stream": true})"};
  const std::vector<std::string> paths = {"/v1/completions", "/generate", "/v1/chat/completions"};
  int ok = 0, client_errors = 0;
  for (int i = 0; i < 150; ++i) {
    std::string body = seeds[size_t(i) % seeds.size()];
    // Mutate: truncate, flip bytes, insert junk, or swap types.
    switch (rng() % 4) {
      case 0: body = body.substr(0, rng() % body.size()); break;
      case 1: body[rng() % body.size()] = char(rng() % 256); break;
      case 2: body.insert(rng() % body.size(), std::string(1 + rng() % 8, char(rng() % 256))); break;
      default: break;
    }
    auto r = HttpClient().Request("POST", server_->Url(paths[rng() % paths.size()]), body, {}, 30000);
    ASSERT_TRUE(r.ok()) << r.error();
    if (r->status_code == 200) ++ok;
    else if (r->status_code >= 400 && r->status_code < 500) ++client_errors;
    else ADD_FAILURE() << r->status_code << " for " << body;
  }
  EXPECT_GT(ok + client_errors, 0);
  EXPECT_EQ(Get(*server_, "/health").status_code, 200);
  // Nothing left running; used tokens are only what the prefix cache keeps.
  EXPECT_TRUE(NothingRunning(WaitForMetrics(*server_, NothingRunning)));
  const std::string m = Get(*server_, "/metrics").body;
  EXPECT_NE(m.find("sglang:num_running_reqs{model_name=\"bard\"} 0"), std::string::npos) << m;
  EXPECT_NE(m.find("sglang:num_queue_reqs{model_name=\"bard\"} 0"), std::string::npos) << m;
  EXPECT_NE(m.find("sglang:num_used_tokens{model_name=\"bard\"} 0"), std::string::npos) << m;
}

TEST(Serve, MetricsAreValidPrometheusTextAndCountRequests) {
  // A model name with every character the text format must escape.
  const std::string name = "org/model \"v2\" \\ x\nline two";
  ServerProcess s({"--enable-metrics", "--served-model-name", name});
  ASSERT_TRUE(s.running()) << s.log();
  const auto start = WaitForMetrics(s, [](const auto&) { return true; });
  ASSERT_FALSE(start.empty());
  for (const auto& family : start) {
    for (const auto& sample : family.samples) {
      ASSERT_NE(sample.Label("model_name"), nullptr) << sample.name;
      EXPECT_EQ(*sample.Label("model_name"), name) << sample.name;
    }
  }
  EXPECT_EQ(MetricValue(start, "sglang:num_requests_total"), 0);
  EXPECT_EQ(MetricValue(start, "sglang:max_total_num_tokens"), 8192);
  EXPECT_EQ(testing::FindFamily(start, "sglang:num_finished_reqs"), nullptr);  // not an SGLang name

  // One request finishes; one is aborted when its client leaves after the first event.
  ASSERT_EQ(Post(s, "/generate", R"({"text": "ROMEO:", "sampling_params": {"max_new_tokens": 8, "ignore_eos": true}})").status_code,
            200);
  Status st = HttpClient().Stream("POST", s.Url("/generate"),
                                  R"({"text": "KING:", "stream": true, "sampling_params": {"max_new_tokens": 1900, "ignore_eos": true}})",
                                  {}, 30000, [](std::string_view) { return false; });
  EXPECT_TRUE(st.ok()) << st.message();
  const auto m = WaitForMetrics(s, [](const auto& page) {
    return MetricValue(page, "sglang:num_requests_total") == 2 &&
           MetricValue(page, "sglang:e2e_request_latency_seconds") == 2;
  });
  EXPECT_EQ(MetricValue(m, "sglang:num_requests_total"), 2);
  EXPECT_EQ(MetricValue(m, "sglang:num_aborted_requests_total"), 1);
  EXPECT_EQ(MetricValue(m, "sglang:e2e_request_latency_seconds"), 2);
  EXPECT_GE(MetricValue(m, "sglang:generation_tokens_total"), 8);
  EXPECT_GT(MetricValue(m, "sglang:prompt_tokens_total"), 2);
  EXPECT_EQ(MetricValue(m, "sglang:num_running_reqs"), 0);
}

TEST(Serve, ApiKeyGuardsEverythingButHealth) {
  ServerProcess s({"--api-key", "sesame"});
  ASSERT_TRUE(s.running()) << s.log();
  EXPECT_EQ(Get(s, "/health").status_code, 200);
  EXPECT_EQ(Get(s, "/v1/models").status_code, 401);
  EXPECT_EQ(Get(s, "/v1/models", {{"Authorization", "Bearer wrong"}}).status_code, 401);
  EXPECT_EQ(Get(s, "/v1/models", {{"Authorization", "Bearer sesame"}}).status_code, 200);
}

// A speculative server's greedy completion equals a plain server's token for token (the verify
// path), and its decode log's best interval appended more than the one bonus token per verify
// step (drafts were accepted).
void ExpectPlainGreedyTextWithAcceptedDrafts(ServerProcess& plain, ServerProcess& speculative) {
  ASSERT_TRUE(plain.running()) << plain.log();
  ASSERT_TRUE(speculative.running()) << speculative.log();
  const std::string body = R"({"model": "bard", "prompt": "ROMEO:", "max_tokens": 96, "temperature": 0})";
  const auto a = Post(plain, "/v1/completions", body), b = Post(speculative, "/v1/completions", body);
  ASSERT_EQ(a.status_code, 200) << a.body;
  ASSERT_EQ(b.status_code, 200) << b.body;
  EXPECT_EQ(json::parse(b.body)["choices"][0]["text"], json::parse(a.body)["choices"][0]["text"]);
  EXPECT_EQ(json::parse(b.body)["usage"]["completion_tokens"], 96);
  const std::regex accept(R"(accept len: ([0-9.]+))");
  const std::string log = speculative.log();
  double best = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), accept), end; it != end; ++it) {
    best = std::max(best, std::stod((*it)[1]));
  }
  EXPECT_GT(best, 1.0) << log;
}

TEST(Serve, NgramSpeculationGivesThePlainServersGreedyText) {
  ServerProcess plain;
  ServerProcess speculative({"--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4",
                             "--decode-log-interval", "1"});
  ExpectPlainGreedyTextWithAcceptedDrafts(plain, speculative);
}

// A speculation setting without the algorithm would be ignored: refused instead.
TEST(Serve, DraftTokensWithoutAnAlgorithmAreRefused) {
  auto r = testing::RunMlaserve("serve --model-path " + testing::ShellQuote(kModel) +
                                " --port 0 --speculative-num-draft-tokens 3");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("need --speculative-algorithm (speculative decoding is off)"), std::string::npos) << r.err;
  r = testing::RunMlaserve("serve --model-path " + testing::ShellQuote(kModel) + " --port 0 --disable-adaptive-speculation");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("need --speculative-algorithm (speculative decoding is off)"), std::string::npos) << r.err;
}

// NEXTN drafts from the checkpoint's MTP layer: the same greedy text as a plain server, drafts
// accepted, SGLang's settings reported; settings it does not implement are refused by name.
TEST(Serve, NextnSpeculationGivesThePlainServersGreedyText) {
  ServerProcess plain;
  // num-draft-tokens 5 with 2 steps: adjusted to 3, with a warning, as SGLang does.
  ServerProcess speculative({"--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2",
                             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "5",
                             "--decode-log-interval", "1"});
  ExpectPlainGreedyTextWithAcceptedDrafts(plain, speculative);
  const auto info = HttpClient().Request("GET", speculative.Url("/get_server_info"), "", {}, 10000);
  ASSERT_TRUE(info.ok());
  const json server_info = json::parse(info->body);
  EXPECT_EQ(server_info["speculative_algorithm"], "NEXTN");
  EXPECT_EQ(server_info["speculative_num_steps"], 2);
  EXPECT_EQ(server_info["speculative_num_draft_tokens"], 3);
  EXPECT_EQ(server_info["speculative_adaptive"], true);
  EXPECT_NE(speculative.log().find("--speculative-num-draft-tokens 5 is adjusted to --speculative-num-steps + 1 = 3"),
            std::string::npos)
      << speculative.log();
}

// EAGLE-3 drafts from the bundled draft checkpoint, with step tuning: the same greedy text as a
// plain server, drafts accepted (the first tuning round drafts), the draft's load line and the
// settings reported.
TEST(Serve, Eagle3SpeculationGivesThePlainServersGreedyText) {
  const std::string draft = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla-eagle3";
  ServerProcess plain;
  ServerProcess speculative({"--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft,
                             "--speculative-num-steps", "3", "--decode-log-interval", "1",
                             "--enable-speculative-step-tuning"});
  ExpectPlainGreedyTextWithAcceptedDrafts(plain, speculative);
  const auto info = HttpClient().Request("GET", speculative.Url("/get_server_info"), "", {}, 10000);
  ASSERT_TRUE(info.ok());
  const json server_info = json::parse(info->body);
  EXPECT_EQ(server_info["speculative_algorithm"], "EAGLE3");
  EXPECT_EQ(server_info["speculative_num_steps"], 3);
  EXPECT_EQ(server_info["speculative_num_draft_tokens"], 4);
  EXPECT_EQ(server_info["speculative_draft_model_path"], draft);
  EXPECT_EQ(server_info["speculative_step_tuning"], true);
  EXPECT_NE(speculative.log().find("EAGLE-3 draft " + draft + ": draft vocabulary 1024 of 2048, target layers [1,2,3]"),
            std::string::npos)
      << speculative.log();
}

TEST(Serve, SpeculationSettingsItDoesNotImplementAreRefused) {
  const struct {
    std::string flags;
    std::string message;
  } cases[] = {
      {"--speculative-algorithm EAGLE3", "EAGLE3 needs --speculative-draft-model-path"},
      {"--speculative-algorithm EAGLE", "EAGLE (EAGLE-1/2 drafts) is not implemented"},
      {"--speculative-algorithm STANDALONE", "STANDALONE is not supported"},
      {"--speculative-algorithm NEXTN --speculative-eagle-topk 4", "tree drafts are not implemented"},
      {"--speculative-algorithm EAGLE3 --speculative-draft-model-path /nonexistent --speculative-eagle-topk 2",
       "tree drafts are not implemented"},
      {"--speculative-algorithm NGRAM --speculative-num-steps 3", "are for NEXTN and EAGLE3, not NGRAM"},
      {"--speculative-algorithm NEXTN --speculative-draft-model-path /x", "is only used with EAGLE3"},
      {"--speculative-draft-model-path /x", "need --speculative-algorithm"},
      {"--enable-speculative-step-tuning", "need --speculative-algorithm"},
      {"--speculative-algorithm NGRAM --enable-speculative-step-tuning", "is for NEXTN and EAGLE3"},
      {"--speculative-algorithm EAGLE3 --speculative-draft-model-path /nonexistent", "/nonexistent/config.json"},
      // The bundled model as its own draft: not an EAGLE-3 checkpoint.
      {"--speculative-algorithm EAGLE3 --speculative-draft-model-path " + testing::ShellQuote(kModel),
       "an EAGLE-3 draft (LlamaForCausalLMEagle3) is expected"},
  };
  for (const auto& c : cases) {
    auto r = testing::RunMlaserve("serve --model-path " + testing::ShellQuote(kModel) + " --port 0 " + c.flags);
    EXPECT_EQ(r.exit_code, 2) << c.flags << " -> " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.flags << " -> " << r.err;
  }  // A checkpoint without an MTP layer: one line naming it.
  auto r = testing::RunMlaserve("serve --model-path " +
                                testing::ShellQuote(std::string(MLASERVE_SOURCE_DIR) + "/tests/fixtures/tiny-v2") +
                                " --port 0 --speculative-algorithm NEXTN");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("the checkpoint has no MTP layer (config.json: num_nextn_predict_layers is 0)"),
            std::string::npos)
      << r.err;
}

TEST(Serve, UnimplementedFlagsAreRefused) {
  for (const char* flag : {"--enable-hierarchical-cache", "--hicache-size 8", "--dp-size 8", "--radix-eviction-policy lfu"}) {
    auto r = testing::RunMlaserve("serve --model-path " + testing::ShellQuote(kModel) + " --port 0 " + flag);
    EXPECT_EQ(r.exit_code, 2) << flag;
    EXPECT_NE(r.err.find("not supported"), std::string::npos) << flag << " -> " << r.err;
  }
}

TEST(Serve, SigtermDrainsInFlightAndRefusesNewWork) {
  ServerProcess s({"--drain-timeout", "60"});
  ASSERT_TRUE(s.running()) << s.log();
  json result;
  std::thread client([&] {
    auto r = HttpClient().Request("POST", s.Url("/generate"),
                                  R"({"text": "KING:", "sampling_params": {"max_new_tokens": 400, "ignore_eos": true}})",
                                  {}, 60000);
    if (r.ok() && r->status_code == 200) result = json::parse(r->body);
  });
  EXPECT_TRUE(testing::WaitForRunningRequests(s)) << s.log();
  s.Signal(SIGTERM);
  // New work is refused once the server says it drains.
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       s.log().find("draining") == std::string::npos && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(s.log().find("draining"), std::string::npos) << s.log();
  // The listener stays open while draining: a new generation gets 503.
  auto refused = HttpClient().Request("POST", s.Url("/generate"), R"({"text": "x"})", {}, 5000);
  ASSERT_TRUE(refused.ok()) << refused.error();
  EXPECT_EQ(refused->status_code, 503) << refused->body;
  client.join();
  EXPECT_EQ(s.Wait(), 0) << s.log();
  ASSERT_TRUE(result.is_object());
  EXPECT_EQ(result["meta_info"]["completion_tokens"], 400);  // finished, not cut
  EXPECT_NE(s.log().find("draining"), std::string::npos);
}

TEST(Serve, DrainTimeoutAbortsWithAClearReason) {
  ServerProcess s({"--drain-timeout", "0.1"});
  ASSERT_TRUE(s.running()) << s.log();
  json result;
  std::thread client([&] {
    auto r = HttpClient().Request("POST", s.Url("/generate"),
                                  R"({"text": "KING:", "sampling_params": {"max_new_tokens": 1900, "ignore_eos": true}})",
                                  {}, 60000);
    if (r.ok()) result = json::parse(r->body, nullptr, false);
  });
  EXPECT_TRUE(testing::WaitForRunningRequests(s)) << s.log();
  s.Signal(SIGTERM);
  client.join();
  EXPECT_EQ(s.Wait(), 0) << s.log();
  ASSERT_TRUE(result.is_object()) << s.log();
  EXPECT_EQ(result["meta_info"]["finish_reason"]["type"], "abort") << result.dump();
  EXPECT_NE(result["meta_info"]["finish_reason"]["message"].get<std::string>().find("shutting down"), std::string::npos);
}

TEST_F(ServeTest, ThreeHundredConcurrentStreamsAreAllServed) {
  constexpr int kStreams = 300;
  const std::string body =
      R"({"text": "ROMEO:", "stream": true, "sampling_params": {"max_new_tokens": 8, "ignore_eos": true}})";
  std::atomic<int> completed{0};
  std::atomic<int> unavailable{0};
  std::vector<std::string> failures(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      SseParser parser;
      bool done = false;
      HttpResponse head;
      Status st = HttpClient().Stream("POST", server_->Url("/generate"), body, {}, 60000,
                                      [&](std::string_view piece) {
                                        parser.Feed(piece, [&](const SseEvent& e) { done = done || e.data == "[DONE]"; });
                                        return true;
                                      },
                                      &head);
      if (st.ok() && head.status_code == 200 && done) {
        ++completed;
      } else {
        if (st.message().rfind("HTTP 503", 0) == 0) ++unavailable;
        failures[size_t(i)] = st.ok() ? "stream ended without [DONE]" : st.message();
      }
    });
  }
  for (std::thread& client : clients) client.join();
  std::printf("concurrent streams: %d opened at once, %d completed with 200, %d got 503\n", kStreams,
              completed.load(), unavailable.load());
  EXPECT_EQ(completed.load(), kStreams);
  EXPECT_EQ(unavailable.load(), 0);
  for (const std::string& failure : failures) {
    if (!failure.empty()) {
      ADD_FAILURE() << failure;
      break;
    }
  }
}

// Raises this process's open-file soft limit to its hard limit; the soft limit after.
rlim_t RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

TEST_F(ServeTest, HealthAnswersUnderAThousandConnectionSlowloris) {
  constexpr int kSlowClients = 1000;
  constexpr int kProbes = 20;
  if (RaiseOpenFileLimit() < kSlowClients + 200) GTEST_SKIP() << "the open-file hard limit is below 1200";
  // Each slow client sends the start of a request head, then a header line every 200 ms: never
  // a stall, so only the head deadline (10 s, longer than this test) can end it.
  std::vector<int> slow;
  for (int i = 0; i < kSlowClients; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    slow.push_back(fd);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server_->port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0) << i;
    const std::string start = "POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    ASSERT_EQ(send(fd, start.data(), start.size(), MSG_NOSIGNAL), ssize_t(start.size()));
  }
  std::mutex mutex;
  std::condition_variable stop_cv;
  bool stop = false;
  std::thread trickler([&] {
    std::unique_lock<std::mutex> lock(mutex);
    for (int round = 0; !stop_cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop; }); ++round) {
      const std::string line = "X-Slow-" + std::to_string(round) + ": 1\r\n";
      for (int fd : slow) (void)send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  });

  std::vector<double> latencies_ms;
  for (int i = 0; i < kProbes; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto r = HttpClient().Request("GET", server_->Url("/health"), "", {}, 5000);
    latencies_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->status_code, 200) << r->body;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // pacing: spread over the trickle
  }
  // No slow client was answered (no 503) or closed: each still holds an open, pending request.
  int answered = 0;
  for (int fd : slow) {
    pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 0) != 0) ++answered;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  stop_cv.notify_all();
  trickler.join();
  for (int fd : slow) close(fd);

  std::sort(latencies_ms.begin(), latencies_ms.end());
  const double p50_ms = latencies_ms[latencies_ms.size() / 2];
  const double max_ms = latencies_ms.back();
  std::printf("slowloris: %d connections, /health p50 %.1f ms, max %.1f ms over %d probes\n", kSlowClients, p50_ms,
              max_ms, kProbes);
  EXPECT_EQ(answered, 0);
  EXPECT_LT(max_ms, 1000.0);
  EXPECT_EQ(Get(*server_, "/health").status_code, 200);
}

}  // namespace
}  // namespace mlaserve
