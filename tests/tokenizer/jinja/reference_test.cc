// mlaserve's Jinja engine against @huggingface/jinja (npm, installed in tests/node by
// scripts/setup.sh): templates written for this test, which together use every construct the
// engine supports, render a set of conversations (system, multi-turn, empty and null content,
// tool calls and results, unicode, special tokens written in text, `name` fields, content
// parts, reasoning) through both, and the strings must be identical byte for byte.
// Constructs where Python's Jinja2 (which mlaserve follows) and the JavaScript port differ
// (printing none / booleans / floats, `%` on negatives, map with a filter name) are left out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "support/run_binary.h"

namespace mlaserve {
namespace {

using ojson = nlohmann::ordered_json;

// DeepSeek-style: namespace state across loops, if/elif/else, tool calls with loop.first /
// loop.last, `is none`, `in`, raise_exception, string concatenation.
constexpr const char* kDeepSeekStyle = R"TPL({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}
{%- set ns = namespace(system_prompt='', is_first_sp=true, is_tool=false, is_last_user=false) -%}
{%- for message in messages -%}
  {%- if message['role'] == 'system' -%}
    {%- if ns.is_first_sp -%}
      {%- set ns.system_prompt = ns.system_prompt + message['content'] -%}
      {%- set ns.is_first_sp = false -%}
    {%- else -%}
      {%- set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] -%}
    {%- endif -%}
  {%- endif -%}
{%- endfor -%}
{{ bos_token }}{{ ns.system_prompt }}
{%- for message in messages -%}
  {%- if message['role'] == 'user' -%}
    {%- set ns.is_tool = false -%}
    {%- set ns.is_last_user = true -%}
    {{ '<｜User｜>' + message['content'] }}
  {%- elif message['role'] == 'assistant' and 'tool_calls' in message and message['tool_calls'] -%}
    {%- set ns.is_last_user = false -%}
    {%- if ns.is_tool -%}{{ '<｜tool▁outputs▁end｜>' }}{%- endif -%}
    {%- set ns.is_tool = false -%}
    {{ '<｜Assistant｜>' }}
    {%- if message['content'] is not none -%}{{ message['content'] }}{%- endif -%}
    {%- for tool in message['tool_calls'] -%}
      {%- if loop.first -%}{{ '<｜tool▁calls▁begin｜>' }}{%- endif -%}
      {{ '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n```json\n' + tool['function']['arguments'] + '\n```<｜tool▁call▁end｜>' }}
      {%- if not loop.last -%}{{ '\n' }}{%- else -%}{{ '<｜tool▁calls▁end｜>' + eos_token }}{%- endif -%}
    {%- endfor -%}
  {%- elif message['role'] == 'assistant' -%}
    {%- set ns.is_last_user = false -%}
    {%- if ns.is_tool -%}
      {{ '<｜tool▁outputs▁end｜>' + message['content'] + eos_token }}
      {%- set ns.is_tool = false -%}
    {%- else -%}
      {%- set content = message['content'] -%}
      {%- if '</think>' in content -%}{%- set content = content.split('</think>')[-1] -%}{%- endif -%}
      {{ '<｜Assistant｜>' + content + eos_token }}
    {%- endif -%}
  {%- elif message['role'] == 'tool' -%}
    {%- set ns.is_last_user = false -%}
    {%- if not ns.is_tool -%}
      {{ '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}
      {%- set ns.is_tool = true -%}
    {%- else -%}
      {{ '<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}
    {%- endif -%}
  {%- elif message['role'] != 'system' -%}
    {{ raise_exception('unsupported role: ' + message['role']) }}
  {%- endif -%}
{%- endfor -%}
{%- if ns.is_tool -%}{{ '<｜tool▁outputs▁end｜>' }}{%- endif -%}
{%- if add_generation_prompt and ns.is_last_user and not ns.is_tool -%}
  {{ '<｜Assistant｜>' }}{%- if thinking is defined and thinking -%}{{ '<think>' }}{%- else -%}{{ '</think>' }}{%- endif -%}
{%- endif %})TPL";

// Kimi-style: macros with defaults and keyword arguments, tojson (plain, separators, indent),
// tests (string, mapping, iterable, defined), filters, methods, slicing, block set, dict and
// list literals, the ternary, `~`, loop.index / length / revindex, a loop filter and else.
constexpr const char* kKimiStyle = R"TPL({%- macro render_content(msg) -%}
  {%- set c = msg['content'] -%}
  {%- if c is string -%}{{ c }}
  {%- elif c is iterable and c is not mapping -%}
    {%- for part in c -%}{%- if part['type'] == 'text' -%}{{ part['text'] }}{%- else -%}<|media|>{%- endif -%}{%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
{%- macro header(role, name=none, sep='<|im_middle|>') -%}
  <|im_{{ role }}|>{{ name if name else role }}{{ sep }}
{%- endmacro -%}
{%- if tools -%}
  <|im_system|>tool_declare<|im_middle|>{{ tools | tojson(separators=(',', ':')) }}<|im_end|>
{%- endif -%}
{%- if messages | length == 0 or messages[0]['role'] != 'system' -%}
  {{ header('system') }}You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>
{%- endif -%}
{%- set hist_end = messages | length -%}
{%- for message in messages -%}
  {%- set role = message['role'] -%}
  {%- if role == 'user' -%}
    {{ header('user', name=message.get('name')) }}{{ render_content(message) }}<|im_end|>
  {%- elif role == 'assistant' -%}
    {{ header('assistant', message['name'] | default(none)) }}
    {%- if thinking | default(false) and message.reasoning_content is defined -%}<think>{{ message.reasoning_content | trim }}</think>{%- endif -%}
    {{ render_content(message) }}
    {%- if message['tool_calls'] -%}
      <|tool_calls_section_begin|>
      {%- for tc in message['tool_calls'] -%}
        <|tool_call_begin|>{{ tc['id'] }}<|tool_call_argument_begin|>{{ tc['function']['arguments'] if tc['function']['arguments'] is string else tc['function']['arguments'] | tojson }}<|tool_call_end|>
      {%- endfor -%}
      <|tool_calls_section_end|>
    {%- endif -%}
    <|im_end|>
  {%- elif role == 'tool' -%}
    {{ header('system', 'tool') }}## Return of {{ message.tool_call_id }}
{{ render_content(message) }}<|im_end|>
  {%- else -%}
    {{ header(role, message.name) }}{{ render_content(message) }}<|im_end|>
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ header('assistant') }}{%- if thinking is defined and thinking -%}<think>{%- endif -%}{%- endif -%}
{#- a summary line exercising filters, methods and tests -#}
{%- if debug_summary is defined -%}
{%- set user_texts = messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list -%}
{%- set others = messages | rejectattr('role', 'equalto', 'user') | list -%}
{%- set roles = messages | map(attribute='role') | join(',') -%}
[roles={{ roles }}; users={{ user_texts | length }}; others={{ others | length }}; first={{ (messages | first)['role'] | upper }}; last={{ (messages | last)['role'] | lower }}]
{%- set summary %}{{ roles | replace(',', '/') }}{% endset -%}
[{{ summary }}|{{ roles[:3] }}|{{ roles[-4:] }}|{{ roles[::2] }}|{{ 'x,y'.split(',') | join('+') }}|{{ '  pad  ' | trim }}|{{ 'yes' if 'abc'.startswith('ab') and 'abc'.endswith('bc') else 'no' }}]
{%- for k, v in {'b': 1, 'a': [1, 2]} | items -%}({{ k }}={{ v | tojson }}){%- endfor -%}
{%- for m in messages if m.role != 'system' -%}{{ loop.index }}/{{ loop.length }}/{{ loop.revindex }}{{ ';' if not loop.last else '.' }}{%- else -%}none{%- endfor -%}
{%- for x in [] -%}{{ x }}{%- else -%}[empty]{%- endfor -%}
{{ ' ' ~ (7 // 2) ~ '-' ~ (2 ** 5) ~ '-' ~ (17 % 5) ~ '-' ~ (3 * 4 - 1) }}
{{- ' ' ~ ({'k': 'v', 'n': [1, {'x': 'y'}]} | tojson) }}
{{- ' ' ~ ([{'role': 'r'}] | tojson(indent=2)) }}
{{- ' ' ~ strftime_now('%Y') | length }}
{%- endif -%})TPL";

// Whitespace handling as Hugging Face configures it (trim_blocks, lstrip_blocks), with and
// without `-`, comments, and statements on their own lines.
constexpr const char* kWhitespace = R"TPL({# a comment line #}
{% for message in messages %}
    {% if loop.first %}
BEGIN
    {% endif %}
  [{{ message.role }}]  {{- message.content if message.content is string else '' -}}  [end]
    {%- if message.name is defined %} (from {{ message.name }}){% endif %}

{% if loop.last %}   last{% endif %}
{% endfor %}
{%- if add_generation_prompt %}
  >> {{ 'go' }}
{% endif %}
)TPL";

// Loop controls and a recursive macro.
constexpr const char* kControl = R"TPL({%- macro count_down(n) -%}{{ n }}{%- if n > 0 -%},{{ count_down(n - 1) }}{%- endif -%}{%- endmacro -%}
{%- for m in messages -%}
  {%- if m.role == 'system' -%}{%- continue -%}{%- endif -%}
  {%- if loop.index > 4 -%}{%- break -%}{%- endif -%}
  <{{ m.role }}:{{ loop.index0 }}>
{%- endfor -%}
{{ count_down(3) }}
{%- set a, b = 'A', 'B' -%}{{ a ~ b }}
{%- for i in range(2, 9, 3) -%}:{{ i }}{%- endfor -%}
{%- if messages[0].content is defined and messages[0].content is not none and messages[0].content | length > 3 -%}!{%- endif -%})TPL";

ojson Conversations() {
  return ojson::parse(R"JSON([
    [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "Sys one."}, {"role": "system", "content": "Sys two."},
     {"role": "user", "content": "First question?"}, {"role": "assistant", "content": "<think>hmm</think>First answer."},
     {"role": "user", "content": "Second question?"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}, {"role": "user", "content": "again"}],
    [{"role": "user", "content": "Weather in Paris and Tokyo?"},
     {"role": "assistant", "content": null, "tool_calls": [
        {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "functions.get_weather:1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Tokyo\"}"}}]},
     {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "18°C, cloudy"},
     {"role": "tool", "tool_call_id": "functions.get_weather:1", "content": "24°C, sunny"},
     {"role": "assistant", "content": "Paris 18°C, Tokyo 24°C."},
     {"role": "user", "content": "Thanks"}],
    [{"role": "user", "content": "日本語のテキスト 🚀 emoji, Ελληνικά, ñ, e\u0301, \ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67"},
     {"role": "assistant", "content": "回答 ✅"}, {"role": "user", "content": "حسنا"}],
    [{"role": "user", "content": "Text with <｜User｜> and <|im_end|> and {{ not a tag }} and {% neither %} written in"},
     {"role": "assistant", "content": "<｜end▁of▁sentence｜> literal"}, {"role": "user", "content": "ok"}],
    [{"role": "system", "content": "Group chat."}, {"role": "user", "name": "alice", "content": "Hello from Alice"},
     {"role": "user", "name": "bob", "content": "Hello from Bob"}, {"role": "assistant", "name": "kimi", "content": "Hi both"},
     {"role": "user", "content": "And me"}],
    [{"role": "user", "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]},
     {"role": "assistant", "content": "Answer", "reasoning_content": "  I should answer.  "},
     {"role": "user", "content": "Next"}],
    [{"role": "user", "content": "Call it"},
     {"role": "assistant", "content": "Calling.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": {"q": "x", "n": 2}}}]},
     {"role": "tool", "tool_call_id": "call_1", "content": "{\"result\": [1, 2]}"}]
  ])JSON");
}

struct TemplateCase {
  const char* name;
  const char* source;
};

constexpr TemplateCase kTemplates[] = {
    {"deepseek_style", kDeepSeekStyle},
    {"kimi_style", kKimiStyle},
    {"whitespace", kWhitespace},
    {"control", kControl},
};

ojson Cases() {
  const ojson tools = ojson::parse(R"JSON([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather for a city, in °C", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])JSON");
  ojson cases = ojson::array();
  for (const TemplateCase& t : kTemplates) {
    for (const ojson& conversation : Conversations()) {
      // DeepSeek's templates concatenate content and arguments as strings: Jinja2 refuses a
      // list or a dict there.
      const bool has_parts = std::any_of(conversation.begin(), conversation.end(), [](const ojson& m) {
        return m["content"].is_array() ||
               (m.contains("tool_calls") && !m["tool_calls"][0]["function"]["arguments"].is_string());
      });
      if (has_parts && std::string(t.name) == "deepseek_style") continue;
      for (int variant = 0; variant < 4; ++variant) {
        ojson kwargs = {{"bos_token", "<｜begin▁of▁sentence｜>"}, {"eos_token", "<｜end▁of▁sentence｜>"}};
        if (variant & 1) kwargs["thinking"] = true;
        if (variant == 3) {
          kwargs["tools"] = tools;
          kwargs["debug_summary"] = true;
        }
        cases.push_back({{"name", std::string(t.name)},
                         {"template", t.source},
                         {"messages", conversation},
                         {"add_generation_prompt", variant >= 2},
                         {"kwargs", kwargs}});
      }
    }
  }
  return cases;
}

std::string RunCommand(const std::string& cmd, int* exit_code) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  *exit_code = WEXITSTATUS(pclose(p));
  return out;
}

const std::string kNodeDir = std::string(MLASERVE_SOURCE_DIR) + "/tests/node";

bool ReferenceInstalled() {
  return std::system("command -v node >/dev/null 2>&1") == 0 &&
         std::system(("test -d " + testing::ShellQuote(kNodeDir + "/node_modules/@huggingface/jinja")).c_str()) == 0;
}

struct Rendered {
  ojson reference;  // @huggingface/jinja: [{output} | {error}]
  ojson ours;       // mlaserve render-chat: the same shape
};

// Writes `cases` to a temp dir and renders them with both engines.
Rendered RenderWithBoth(const ojson& cases) {
  testing::TempDir dir;
  const std::string cases_path = dir.path() + "/cases.json";
  std::ofstream(cases_path) << cases.dump();
  int node_exit = -1;
  const std::string node_out = RunCommand(
      "node " + testing::ShellQuote(kNodeDir + "/render_chat_templates.mjs") + " " + testing::ShellQuote(cases_path),
      &node_exit);
  EXPECT_EQ(node_exit, 0) << node_out;
  const testing::CommandResult ours = testing::RunMlaserve("render-chat --cases " + testing::ShellQuote(cases_path));
  EXPECT_EQ(ours.exit_code, 0) << ours.err;
  return {ojson::parse(node_out, nullptr, false), ojson::parse(ours.out, nullptr, false)};
}

TEST(JinjaReference, SameStringsAsHuggingFaceJinja) {
  if (!ReferenceInstalled()) GTEST_SKIP() << "node or the @huggingface/jinja package is missing (scripts/setup.sh installs them)";
  const ojson cases = Cases();
  const Rendered r = RenderWithBoth(cases);
  const ojson& expected = r.reference;
  const ojson& actual = r.ours;
  ASSERT_EQ(expected.size(), cases.size());
  ASSERT_EQ(actual.size(), cases.size());
  int compared = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string label = cases[i]["name"].get<std::string>() + " case " + std::to_string(i);
    EXPECT_FALSE(expected[i].contains("error")) << label << ": the reference failed: " << expected[i]["error"];
    EXPECT_TRUE(actual[i].contains("output")) << label << ": " << actual[i]["error"];
    if (!expected[i].contains("output") || !actual[i].contains("output")) continue;
    EXPECT_EQ(actual[i]["output"].get<std::string>(), expected[i]["output"].get<std::string>()) << label;
    ++compared;
  }
  EXPECT_EQ(compared, int(cases.size()));
}

// A template's own refusal is an error in both (messages differ by design).
TEST(JinjaReference, RaiseExceptionFailsInBoth) {
  if (!ReferenceInstalled()) GTEST_SKIP() << "node or the @huggingface/jinja package is missing (scripts/setup.sh installs them)";
  ojson cases = ojson::array();
  cases.push_back({{"template", kDeepSeekStyle},
                   {"messages", ojson::parse(R"([{"role": "critic", "content": "x"}])")},
                   {"kwargs", {{"bos_token", "<s>"}, {"eos_token", "</s>"}}}});
  const Rendered r = RenderWithBoth(cases);
  const ojson& expected = r.reference;
  const ojson& actual = r.ours;
  ASSERT_EQ(actual.size(), 1u);
  ASSERT_EQ(expected.size(), 1u);
  EXPECT_TRUE(expected[0].contains("error"));
  ASSERT_TRUE(actual[0].contains("error"));
  EXPECT_NE(actual[0]["error"].get<std::string>().find("unsupported role: critic"), std::string::npos) << actual[0];
}

}  // namespace
}  // namespace mlaserve
