// The server renders chat with the model's Jinja template or --chat-template FILE: message
// `name`s and chat_template_kwargs reach the template, a template's refusal is a 400 naming its
// line, and GET /tokenizer_file/chat_template.jinja hands the template to `mlaserve batch`.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/server_process.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::Get;
using testing::Post;
using testing::ServerProcess;

// The bundled model's format, plus the speaker's name and a kwargs switch.
constexpr const char* kTemplate =
    "<|bos|>{% for m in messages %}<|{{ m.role }}|>{% if m.name is defined %}{{ m.name }}: {% endif %}"
    "{{ m.content }}<|end|>{% endfor %}\n"
    "{% if refuse is defined and refuse %}{{ raise_exception('refused by kwargs') }}{% endif %}\n"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

class ChatTemplateServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    std::ofstream(dir_->path() + "/chat.jinja") << kTemplate;
    server_ = new ServerProcess({"--chat-template", dir_->path() + "/chat.jinja"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static HttpResponse Chat(const json& extra) {
    json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 1}, {"temperature", 0}};
    for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
    return Post(*server_, "/v1/chat/completions", body.dump());
  }
  static testing::TempDir* dir_;
  static ServerProcess* server_;
};
testing::TempDir* ChatTemplateServeTest::dir_ = nullptr;
ServerProcess* ChatTemplateServeTest::server_ = nullptr;

TEST_F(ChatTemplateServeTest, NamesReachTheTemplate) {
  const HttpResponse plain = Chat(json::object());
  ASSERT_EQ(plain.status_code, 200) << plain.body;
  const HttpResponse named = Chat({{"messages", {{{"role", "user"}, {"name", "romeo"}, {"content", "hi"}}}}});
  ASSERT_EQ(named.status_code, 200) << named.body;
  EXPECT_GT(json::parse(named.body)["usage"]["prompt_tokens"].get<int>(),
            json::parse(plain.body)["usage"]["prompt_tokens"].get<int>());
  EXPECT_NE(server_->log().find("chat template: " + dir_->path() + "/chat.jinja"), std::string::npos) << server_->log();
}

TEST_F(ChatTemplateServeTest, KwargsReachTheTemplateAndARefusalNamesTheLine) {
  EXPECT_EQ(Chat({{"chat_template_kwargs", {{"refuse", false}}}}).status_code, 200);
  const HttpResponse refused = Chat({{"chat_template_kwargs", {{"refuse", true}}}});
  EXPECT_EQ(refused.status_code, 400);
  EXPECT_NE(refused.body.find("chat template line 2: the chat template refused the request: refused by kwargs"),
            std::string::npos)
      << refused.body;
  const HttpResponse bad = Chat({{"chat_template_kwargs", "thinking"}});
  EXPECT_EQ(bad.status_code, 400);
  EXPECT_NE(bad.body.find("'chat_template_kwargs' must be an object"), std::string::npos) << bad.body;
  const HttpResponse bad_name = Chat({{"messages", {{{"role", "user"}, {"name", 3}, {"content", "hi"}}}}});
  EXPECT_EQ(bad_name.status_code, 400);
  EXPECT_NE(bad_name.body.find("'name' must be a string"), std::string::npos) << bad_name.body;
}

TEST_F(ChatTemplateServeTest, ServesItsTemplateToBatchClients) {
  const HttpResponse r = Get(*server_, "/tokenizer_file/chat_template.jinja");
  EXPECT_EQ(r.status_code, 200);
  EXPECT_EQ(r.body, kTemplate);
}

TEST(ChatTemplateServe, ABrokenTemplateStopsStartUpWithItsLine) {
  testing::TempDir dir;
  std::ofstream(dir.path() + "/bad.jinja") << "{% for m in messages %}\n{{ m.content }";
  ServerProcess server({"--chat-template", dir.path() + "/bad.jinja"});
  EXPECT_NE(server.Wait(), 0);
  EXPECT_NE(server.log().find(dir.path() + "/bad.jinja: chat template line 2: "), std::string::npos) << server.log();
}

}  // namespace
}  // namespace mlaserve
