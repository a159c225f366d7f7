// --reasoning-parser and --tool-call-parser through the real server, against a model whose
// replies the test writes (support/scripted_model.h): reasoning_content apart from content,
// streamed as deltas with the end marker cut across tokens; tool calls parsed into OpenAI
// tool_calls (streamed: a first delta with id and name, then argument pieces) with
// finish_reason "tool_calls"; tools, tool_calls and tool_call_id reaching the template; and the
// refusals. The official openai npm client runs against the same servers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "support/scripted_model.h"
#include "support/server_process.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using testing::Post;
using testing::ScriptedModel;
using testing::ServerLaunch;
using testing::ServerProcess;

// Written for this test: tools, earlier tool calls and tool results all show in the prompt, and
// "thinking": false leaves out the opening <think>.
constexpr const char* kTemplate =
    "{{ bos_token }}{% if tools %}<|system|>tools: {{ tools | tojson }}<|end|>{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|assistant|>{{ m.content or '' }}"
    "{% if m.tool_calls %}{% for call in m.tool_calls %}[{{ call.id }}] {{ call.type }} {{ call.function.name }}"
    "({{ call.function.arguments }}){% endfor %}{% endif %}<|end|>"
    "{% elif m.role == 'tool' %}<|user|>result of {{ m.tool_call_id }}: {{ m.content }}<|end|>"
    "{% else %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if thinking is not defined or thinking %}<think>\n{% endif %}{% endif %}"
    "{% if expected_tools is defined and (tools | tojson) != expected_tools %}"
    "{{ raise_exception('tools rendered as ' ~ (tools | tojson)) }}{% endif %}";

const std::vector<testing::ScriptedToken>& Tokens() {
  static const std::vector<testing::ScriptedToken> tokens = {
      {"<｜tool▁calls▁begin｜>", true}, {"<｜tool▁call▁begin｜>", true}, {"<｜tool▁sep｜>", true},
      {"<｜tool▁call▁end｜>", true}, {"<｜tool▁calls▁end｜>", true},
      {"<|tool_calls_section_begin|>", true}, {"<|tool_call_begin|>", true}, {"<|tool_call_argument_begin|>", true},
      {"<|tool_call_end|>", true}, {"<|tool_calls_section_end|>", true},
      {"<think>"}, {"</"}, {"think>"}, {"◁think▷"}, {"◁/"}, {"think▷"},
      {"Let me think"}, {" about it"}, {"Sunny."}, {"oops"},
      {"function"}, {"get_weather"}, {"\n```json\n"}, {"{\"city\": "}, {"\"Paris\"}"}, {"\n```"},
      {"functions.get_weather:0"}};
  return tokens;
}

// The scripts (token texts in order).
const std::vector<std::string> kReasoned = {"Let me think", " about it", "</", "think>", "Sunny.", "<|eos|>"};
const std::vector<std::string> kDeepSeekCall = {
    "Let me think", "</", "think>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function", "<｜tool▁sep｜>",
    "get_weather", "\n```json\n", "{\"city\": ", "\"Paris\"}", "\n```", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>",
    "<|eos|>"};
const std::vector<std::string> kKimiCall = {
    "◁think▷", "Let me think", "◁/", "think▷", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
    "functions.get_weather:0", "<|tool_call_argument_begin|>", "{\"city\": ", "\"Paris\"}", "<|tool_call_end|>",
    "<|tool_calls_section_end|>", "<|eos|>"};

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "The weather in a city", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");

class ReasoningToolsServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new ScriptedModel(Tokens(), kTemplate);
    const ServerLaunch launch{.model_path = model_->path()};
    deepseek_ = new ServerProcess(launch, {"--reasoning-parser", "deepseek-r1", "--tool-call-parser", "deepseekv3"});
    kimi_ = new ServerProcess(launch, {"--reasoning-parser", "kimi", "--tool-call-parser", "kimi_k2"});
    plain_ = new ServerProcess(launch, {});
  }
  static void TearDownTestSuite() {
    delete plain_;
    delete kimi_;
    delete deepseek_;
    delete model_;
  }
  static json Body(const std::vector<std::string>& script, const json& extra = json::object()) {
    json body = model_->Force(script);
    body["messages"] = {{{"role", "user"}, {"content", "Weather in Paris?"}}};
    for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
    return body;
  }
  static json Chat(const ServerProcess& server, const json& body) {
    const HttpResponse r = Post(server, "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status_code, 200) << r.body;
    return json::parse(r.body, nullptr, false);
  }
  static HttpResponse Refused(const json& body) { return Post(*deepseek_, "/v1/chat/completions", body.dump()); }
  // The prompt's length as this test renders and encodes it: what the server's must equal.
  static int PromptTokens(const json& messages, const json& kwargs) {
    auto tokenizer = Tokenizer::FromDirectory(model_->path());
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.error();
    auto chat_template = ChatTemplate::FromJinja(kTemplate, "test", {{"bos_token", "<|bos|>"}, {"eos_token", "<|eos|>"}});
    EXPECT_TRUE(chat_template.ok()) << chat_template.error();
    auto text = chat_template->Render(messages, true, kwargs);
    EXPECT_TRUE(text.ok()) << text.error();
    return int(tokenizer->Encode(*text, false)->size());
  }
  // Streams and returns the chunks' first choices.
  static std::vector<json> StreamChoices(const ServerProcess& server, json body) {
    body["stream"] = true;
    std::vector<json> choices;
    for (const std::string& event : testing::StreamEvents(server, "/v1/chat/completions", body.dump())) {
      if (event == "[DONE]") continue;
      const json chunk = json::parse(event);
      if (!chunk["choices"].empty()) choices.push_back(chunk["choices"][0]);
    }
    return choices;
  }
  static ScriptedModel* model_;
  static ServerProcess* deepseek_;
  static ServerProcess* kimi_;
  static ServerProcess* plain_;
};
ScriptedModel* ReasoningToolsServeTest::model_ = nullptr;
ServerProcess* ReasoningToolsServeTest::deepseek_ = nullptr;
ServerProcess* ReasoningToolsServeTest::kimi_ = nullptr;
ServerProcess* ReasoningToolsServeTest::plain_ = nullptr;

TEST_F(ReasoningToolsServeTest, ReasoningContentIsSeparate) {
  const json r = Chat(*deepseek_, Body(kReasoned));
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["message"]["reasoning_content"], "Let me think about it") << r.dump();
  EXPECT_EQ(choice["message"]["content"], "Sunny.") << r.dump();
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(r["usage"]["completion_tokens"], 6);
}

TEST_F(ReasoningToolsServeTest, ReasoningStreamsAsDeltasWithTheEndMarkerCutAcrossTokens) {
  std::string reasoning, content;
  int reasoning_events = 0;
  std::string finish;
  for (const json& choice : StreamChoices(*deepseek_, Body(kReasoned))) {
    const json& delta = choice["delta"];
    if (delta.contains("reasoning_content")) {
      EXPECT_TRUE(content.empty()) << "reasoning after the answer began: " << delta.dump();
      reasoning += delta["reasoning_content"].get<std::string>();
      ++reasoning_events;
    }
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(reasoning, "Let me think about it");
  EXPECT_EQ(reasoning_events, 2);  // one per token: nothing waits but the marker's beginning
  EXPECT_EQ(content, "Sunny.");
  EXPECT_EQ(finish, "stop");
  // "stream_reasoning": false (SGLang's field): the reasoning in one delta, when it ends.
  std::vector<std::string> held;
  for (const json& choice : StreamChoices(*deepseek_, Body(kReasoned, {{"stream_reasoning", false}}))) {
    if (choice["delta"].contains("reasoning_content")) held.push_back(choice["delta"]["reasoning_content"]);
  }
  EXPECT_EQ(held, std::vector<std::string>{"Let me think about it"});
  EXPECT_EQ(Post(*deepseek_, "/v1/chat/completions", Body(kReasoned, {{"stream_reasoning", false}}).dump()).status_code,
            400);
  // Logprobs of a held-back token travel with the next event: none are lost.
  size_t streamed_logprobs = 0;
  for (const json& choice : StreamChoices(*deepseek_, Body(kReasoned, {{"logprobs", true}}))) {
    if (choice["logprobs"].is_object()) streamed_logprobs += choice["logprobs"]["content"].size();
  }
  const json whole = Chat(*deepseek_, Body(kReasoned, {{"logprobs", true}}));
  EXPECT_EQ(streamed_logprobs, whole["choices"][0]["logprobs"]["content"].size());
  EXPECT_GE(streamed_logprobs, 5u);
}

TEST_F(ReasoningToolsServeTest, SeparateReasoningFalseAndNoParserKeepTheText) {
  const json off = Chat(*deepseek_, Body(kReasoned, {{"separate_reasoning", false}}));
  EXPECT_EQ(off["choices"][0]["message"]["content"], "Let me think about it</think>Sunny.") << off.dump();
  EXPECT_FALSE(off["choices"][0]["message"].contains("reasoning_content"));
  const json plain = Chat(*plain_, Body(kReasoned));
  EXPECT_EQ(plain["choices"][0]["message"]["content"], "Let me think about it</think>Sunny.") << plain.dump();
  EXPECT_FALSE(plain["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_EQ(Post(*plain_, "/v1/chat/completions", Body(kReasoned, {{"separate_reasoning", "yes"}}).dump()).status_code,
            400);
}

TEST_F(ReasoningToolsServeTest, ThinkingOffReachesTheTemplateAndTheParser) {
  const json kwargs = {{"thinking", false}};
  const json r = Chat(*deepseek_, Body({"Sunny.", "<|eos|>"}, {{"chat_template_kwargs", kwargs}}));
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Sunny.") << r.dump();
  EXPECT_TRUE(r["choices"][0]["message"]["reasoning_content"].is_null()) << r.dump();
  const json messages = Body({})["messages"];
  EXPECT_EQ(r["usage"]["prompt_tokens"], PromptTokens(messages, kwargs));
  EXPECT_LT(PromptTokens(messages, kwargs), PromptTokens(messages, json::object()));
}

TEST_F(ReasoningToolsServeTest, DeepSeekToolCallsWithToolsInThePrompt) {
  const json r = Chat(*deepseek_, Body(kDeepSeekCall, {{"tools", kTools}}));
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.dump();
  EXPECT_EQ(choice["message"]["reasoning_content"], "Let me think");
  EXPECT_EQ(choice["message"]["content"], "");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.dump();
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city": "Paris"})");
  const std::string id = call["id"];
  EXPECT_EQ(id.rfind("call_", 0), 0u) << id;
  EXPECT_EQ(id.size(), 5u + 24u) << id;
  EXPECT_EQ(r["usage"]["prompt_tokens"], PromptTokens(Body({})["messages"], {{"tools", kTools}}));
}

TEST_F(ReasoningToolsServeTest, ToolCallsStreamAsDeltas) {
  for (const ServerProcess* server : {deepseek_, kimi_}) {
    const auto& script = server == deepseek_ ? kDeepSeekCall : kKimiCall;
    std::string reasoning, content, name, id, arguments, finish;
    int argument_events = 0;
    for (const json& choice : StreamChoices(*server, Body(script, {{"tools", kTools}}))) {
      const json& delta = choice["delta"];
      if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
      if (delta.contains("content")) content += delta["content"].get<std::string>();
      for (const json& call : delta.value("tool_calls", json::array())) {
        EXPECT_EQ(call["index"], 0);
        if (call.contains("id")) {
          EXPECT_TRUE(id.empty()) << "a second first delta: " << call.dump();
          id = call["id"];
          EXPECT_EQ(call["type"], "function");
          name = call["function"]["name"];
        } else {
          EXPECT_FALSE(id.empty()) << "arguments before the call's first delta: " << call.dump();
          EXPECT_FALSE(call["function"].contains("name"));
        }
        const std::string piece = call["function"]["arguments"];
        arguments += piece;
        argument_events += !piece.empty();
      }
      if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
    }
    EXPECT_EQ(reasoning, "Let me think");
    EXPECT_EQ(content, "");
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(arguments, R"({"city": "Paris"})");
    EXPECT_EQ(argument_events, 2);  // {"city": , then "Paris"}
    EXPECT_EQ(finish, "tool_calls");
    if (server == kimi_) {
      EXPECT_EQ(id, "functions.get_weather:0");
    }
  }
}

TEST_F(ReasoningToolsServeTest, ToolsReachTheTemplateInTheClientsKeyOrder) {
  // Not sorted: a template's tojson (Kimi-K2 writes `tools | tojson`) must see the order sent,
  // as Hugging Face's does.
  const std::string tools =
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])";
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "tools": )" + tools +
                           R"(, "chat_template_kwargs": {"expected_tools": )" + json(tools).dump() + "}}";
  const HttpResponse r = Post(*deepseek_, "/v1/chat/completions", body);
  EXPECT_EQ(r.status_code, 200) << r.body;
  std::string sorted_body = body;
  sorted_body.replace(sorted_body.find(R"("name": "get_weather", "parameters": {"type": "object"})"),
                      std::string(R"("name": "get_weather", "parameters": {"type": "object"})").size(),
                      R"("parameters": {"type": "object"}, "name": "get_weather")");
  const HttpResponse reordered = Post(*deepseek_, "/v1/chat/completions", sorted_body);
  EXPECT_EQ(reordered.status_code, 400);
  EXPECT_NE(reordered.body.find("tools rendered as"), std::string::npos) << reordered.body;
}

TEST_F(ReasoningToolsServeTest, KimiIdsCountTheConversationsCallsAndHistoryReachesTheTemplate) {
  const json messages = json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "functions.get_weather:0",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Lyon\"}"}}]},
    {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "rain"},
    {"role": "user", "content": "And Paris?"}])");
  const json r = Chat(*kimi_, Body(kKimiCall, {{"tools", kTools}, {"messages", messages}}));
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["id"], "functions.get_weather:1");
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Let me think");
  // The template saw the call with "type": "function" filled in (it writes the type).
  json rendered = messages;
  rendered[1]["tool_calls"][0]["type"] = "function";
  EXPECT_EQ(r["usage"]["prompt_tokens"], PromptTokens(rendered, {{"tools", kTools}}));
  EXPECT_NE(PromptTokens(rendered, {{"tools", kTools}}), PromptTokens(messages, {{"tools", kTools}}));
}

TEST_F(ReasoningToolsServeTest, ToolChoiceNoneHidesTheToolsAndParsesNothing) {
  const json r = Chat(*deepseek_, Body(kDeepSeekCall, {{"tools", kTools}, {"tool_choice", "none"}}));
  const json& message = r["choices"][0]["message"];
  EXPECT_FALSE(message.contains("tool_calls")) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  // Special tokens are skipped as usual: the call's text without its markers.
  EXPECT_EQ(message["content"], "functionget_weather\n```json\n{\"city\": \"Paris\"}\n```") << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens"], PromptTokens(Body({})["messages"], json::object()));
}

TEST_F(ReasoningToolsServeTest, MalformedToolCallTextIsContent) {
  const json r = Chat(*deepseek_, Body({"</", "think>", "<｜tool▁calls▁begin｜>", "oops", "<|eos|>"}, {{"tools", kTools}}));
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["message"]["content"], "<｜tool▁calls▁begin｜>oops") << r.dump();
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(choice["finish_reason"], "stop");
}

TEST_F(ReasoningToolsServeTest, UnimplementedToolChoicesAndBadToolsAreRefusedByName) {
  auto refusal = [&](const json& extra, const std::string& says) {
    const HttpResponse r = Refused(Body({"Sunny.", "<|eos|>"}, extra));
    EXPECT_EQ(r.status_code, 400) << extra.dump();
    EXPECT_NE(r.body.find(says), std::string::npos) << r.body;
  };
  refusal({{"tools", kTools}, {"tool_choice", "required"}}, R"('tool_choice' \"required\" is not implemented)");
  refusal({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}},
          "naming a function ('get_weather')");
  refusal({{"tools", kTools}, {"tool_choice", "sometimes"}}, R"(\"sometimes\" is not one of)");
  refusal({{"tools", kTools}, {"parallel_tool_calls", false}}, "'parallel_tool_calls'");
  refusal({{"tools", {{{"type", "retrieval"}}}}}, R"(tools[0]: 'type' must be \"function\")");
  refusal({{"tools", kTools}, {"chat_template_kwargs", {{"tools", kTools}}}}, "not in 'chat_template_kwargs'");
  refusal({{"messages", {{{"role", "assistant"}, {"tool_calls", {{{"id", "x"}, {"type", "function"},
                                                                   {"function", {{"name", "f"}, {"arguments", {{"a", 1}}}}}}}}}}}},
          "'function.arguments' must be a string");
  refusal({{"messages", {{{"role", "user"}, {"content", "hi"}, {"tool_call_id", "x"}}}}},
          R"('tool_call_id' belongs to \"tool\" messages)");
  refusal({{"messages", {{{"role", "user"}, {"content", "hi"}, {"tool_calls", json::array()}}}}},
          R"('tool_calls' belongs to \"assistant\" messages)");
  EXPECT_EQ(Refused(Body({"Sunny.", "<|eos|>"}, {{"tools", kTools}, {"parallel_tool_calls", true}})).status_code, 200);
  const HttpResponse completion = Post(*deepseek_, "/v1/completions",
                                       json{{"prompt", "hi"}, {"max_tokens", 1}, {"tools", kTools}}.dump());
  EXPECT_EQ(completion.status_code, 400);
  EXPECT_NE(completion.body.find("'tools'"), std::string::npos) << completion.body;
}

TEST_F(ReasoningToolsServeTest, ServerInfoReportsTheParsers) {
  const json info = json::parse(testing::Get(*kimi_, "/get_server_info").body);
  EXPECT_EQ(info["reasoning_parser"], "kimi");
  EXPECT_EQ(info["tool_call_parser"], "kimi_k2");
  const testing::CommandResult bad = testing::RunMlaserve("serve --reasoning-parser qwen3 --model-path " +
                                                          testing::ShellQuote(model_->path()));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("qwen3"), std::string::npos) << bad.err;
}

TEST_F(ReasoningToolsServeTest, OfficialOpenAiNodeClient) {
  for (const ServerProcess* server : {deepseek_, kimi_}) {
    const std::vector<std::string> kimi_reasoned = {"◁think▷", "Let me think", " about it", "◁/", "think▷", "Sunny.",
                                                    "<|eos|>"};
    const json scripts = {{"reasoned", model_->Force(server == deepseek_ ? kReasoned : kimi_reasoned)},
                          {"call", model_->Force(server == deepseek_ ? kDeepSeekCall : kKimiCall)},
                          {"tools", kTools},
                          {"call_id", server == kimi_ ? json("functions.get_weather:0") : json()}};
    const auto r = testing::RunNodeScript("reasoning_tools.mjs", {server->Url(""), "bard", scripts.dump()});
    if (!r) GTEST_SKIP() << "node or the openai package is missing (scripts/setup.sh installs them)";
    EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
    EXPECT_NE(r->out.find("OK:"), std::string::npos) << r->out << r->err;
  }
}

}  // namespace
}  // namespace mlaserve
