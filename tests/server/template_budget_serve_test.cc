// Issue 24: a client's request cannot crash or exhaust the server through the chat template.
// The server here runs a template that does whatever the client's chat_template_kwargs ask
// (divide, indent, range, replace, print or grow lists), as a hostile or careless template
// would with a client's values; each request that used to end the process (SIGFPE) or grow
// it without bound now gets a 400 naming the limit, and the server keeps serving.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/server_process.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::Get;
using testing::Post;
using testing::ServerProcess;

constexpr const char* kTemplate =
    "{%- if op == 'div' %}{{ a // b }}"
    "{%- elif op == 'mod' %}{{ a % b }}"
    "{%- elif op == 'indent' %}{{ 'a\\nb' | indent(n) }}"
    "{%- elif op == 'range' %}{{ range(a, b, c) | list | length }}"
    "{%- elif op == 'replace' %}{{ ('x' * a) | replace('x', 'y' * b) | length }}"
    "{%- elif op == 'replace_method' %}{{ ('x' * a).replace('x', 'y' * b) | length }}"
    "{%- elif op == 'shared' %}{% set ns = namespace(l=[s]) %}{% for i in range(n) %}{% set ns.l = [ns.l, ns.l] %}"
    "{% endfor %}{{ ns.l | string | length }}"
    "{%- elif op == 'double' %}{% set ns = namespace(l=[s]) %}{% for i in range(n) %}{% set ns.l = ns.l + ns.l %}"
    "{% endfor %}{{ ns.l | length }}"
    "{%- elif op == 'keep' %}{% set ns = namespace(l=[]) %}{% for i in range(n) %}{% set ns.l = ns.l + [(s * a) ~ i] %}"
    "{% endfor %}{{ ns.l | length }}"
    "{%- elif op == 'abs' %}{{ a | abs }}"
    "{%- elif op == 'int' %}{{ f | int }}"
    "{%- endif %}"
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}<|assistant|>";

class TemplateBudgetServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    std::ofstream(dir_->path() + "/hostile.jinja") << kTemplate;
    server_ = new ServerProcess({"--chat-template", dir_->path() + "/hostile.jinja"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static HttpResponse Chat(const json& kwargs) {
    const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                       {"max_tokens", 1},
                       {"temperature", 0},
                       {"chat_template_kwargs", kwargs}};
    return Post(*server_, "/v1/chat/completions", body.dump());
  }
  // A 400 whose message has `text`, and a server that still answers a plain chat.
  static void ExpectRefused(const json& kwargs, const std::string& text) {
    const HttpResponse r = Chat(kwargs);
    EXPECT_EQ(r.status_code, 400) << kwargs.dump() << ": " << r.body;
    EXPECT_NE(r.body.find(text), std::string::npos) << kwargs.dump() << ": " << r.body;
    ASSERT_TRUE(server_->running()) << kwargs.dump() << "\n" << server_->log();
    EXPECT_EQ(Chat({{"op", "none"}}).status_code, 200);
  }
  static testing::TempDir* dir_;
  static ServerProcess* server_;
};
testing::TempDir* TemplateBudgetServeTest::dir_ = nullptr;
ServerProcess* TemplateBudgetServeTest::server_ = nullptr;

// The server's peak resident memory so far (VmHWM), in bytes.
int64_t PeakRssBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

const std::string kTooLarge = "the template built a value larger than 16777216 bytes";

TEST_F(TemplateBudgetServeTest, IntegerDivisionByMinusOneIsAnErrorNotASignal) {
  ExpectRefused({{"op", "div"}, {"a", INT64_MIN}, {"b", -1}}, "integer overflow: -9223372036854775808 // -1");
  ExpectRefused({{"op", "div"}, {"a", 1}, {"b", 0}}, "division by zero");
  ExpectRefused({{"op", "abs"}, {"a", INT64_MIN}}, "integer overflow: abs(-9223372036854775808)");
  ExpectRefused({{"op", "int"}, {"f", 1e300}}, "'int' of 1e+300: out of the 64-bit integer range");
  const HttpResponse mod = Chat({{"op", "mod"}, {"a", INT64_MIN}, {"b", -1}});
  EXPECT_EQ(mod.status_code, 200) << mod.body;  // Python's answer, 0
}

TEST_F(TemplateBudgetServeTest, BuildersAreCheckedBeforeTheyAllocate) {
  ExpectRefused({{"op", "indent"}, {"n", 3000000000}}, kTooLarge);
  ExpectRefused({{"op", "indent"}, {"n", int64_t{1000000000000}}}, kTooLarge);
  EXPECT_EQ(Chat({{"op", "indent"}, {"n", -1}}).status_code, 200);
  ExpectRefused({{"op", "range"}, {"a", INT64_MIN}, {"b", INT64_MAX}, {"c", 1}}, "the template built a list of more than");
  EXPECT_EQ(Chat({{"op", "range"}, {"a", INT64_MIN}, {"b", INT64_MAX}, {"c", int64_t{1} << 62}}).status_code, 200);
  EXPECT_EQ(Chat({{"op", "range"}, {"a", INT64_MAX - 1}, {"b", INT64_MAX}, {"c", 1000}}).status_code, 200);
  ExpectRefused({{"op", "replace"}, {"a", 10000000}, {"b", 100000}}, kTooLarge);
  ExpectRefused({{"op", "replace_method"}, {"a", 10000000}, {"b", 100000}}, kTooLarge);
  ExpectRefused({{"op", "shared"}, {"s", "x"}, {"n", 60}}, kTooLarge);
}

TEST_F(TemplateBudgetServeTest, ConcurrentHostileRendersStayWithinTheirBudgets) {
  ASSERT_EQ(Chat({{"op", "none"}}).status_code, 200);
  const int64_t before = PeakRssBytes(server_->pid());
  ASSERT_GT(before, 0);
  const std::string mib(1 << 20, 'x');
  const std::vector<json> hostile = {
      {{"op", "double"}, {"s", mib}, {"n", 64}},            // a list doubled: 2^64 references to 1 MiB
      {{"op", "keep"}, {"s", "x"}, {"a", 10000000}, {"n", 1000}},  // 10 MB strings kept until the budget
      {{"op", "double"}, {"s", mib}, {"n", 64}},
  };
  std::vector<HttpResponse> answers(hostile.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < hostile.size(); ++i) clients.emplace_back([&, i] { answers[i] = Chat(hostile[i]); });
  for (auto& c : clients) c.join();
  EXPECT_EQ(answers[0].status_code, 400) << answers[0].body;
  EXPECT_NE(answers[0].body.find("the template built a list of more than"), std::string::npos) << answers[0].body;
  EXPECT_EQ(answers[1].status_code, 400) << answers[1].body;
  EXPECT_NE(answers[1].body.find("the template allocated more than 134217728 bytes"), std::string::npos) << answers[1].body;
  EXPECT_EQ(answers[2].status_code, 400) << answers[2].body;
  ASSERT_TRUE(server_->running()) << server_->log();
  EXPECT_EQ(Chat({{"op", "none"}}).status_code, 200);
  // Three renders within 128 MiB each, plus the request bodies: well under 1 GiB more.
  [[maybe_unused]] const int64_t after = PeakRssBytes(server_->pid());
#if !defined(__SANITIZE_ADDRESS__)  // AddressSanitizer's quarantine keeps freed memory resident
  EXPECT_LT(after - before, int64_t{1} << 30) << "peak RSS " << before << " -> " << after;
#endif
}

// Templates and files that used to crash or hang the server: refused at start-up, with a line.
int StartAndExpectRefusal(const std::vector<std::string>& flags, const std::string& text) {
  ServerProcess server(flags);
  const int code = server.Wait();
  EXPECT_NE(server.log().find(text), std::string::npos) << server.log();
  return code;
}

TEST(TemplateBudgetServe, LongOperatorChainsAreRefusedAtStartUp) {
  testing::TempDir dir;
  std::string chain = "{{ 1";
  for (int i = 0; i < 10000; ++i) chain += " + 1";
  std::ofstream(dir.path() + "/chain.jinja") << chain << " }}{% for m in messages %}{{ m.content }}{% endfor %}";
  EXPECT_NE(StartAndExpectRefusal({"--chat-template", dir.path() + "/chain.jinja"},
                                  dir.path() + "/chain.jinja: chat template line 1: an expression nested deeper than 256 operators"),
            0);
}

TEST(TemplateBudgetServe, ADirectoryOrDeviceIsNotATemplate) {
  testing::TempDir dir;
  EXPECT_NE(StartAndExpectRefusal({"--chat-template", dir.path()}, dir.path() + ": is a directory, not a file"), 0);
  EXPECT_NE(StartAndExpectRefusal({"--chat-template", "/dev/zero"}, "/dev/zero: not a regular file"), 0);
}

}  // namespace
}  // namespace mlaserve
