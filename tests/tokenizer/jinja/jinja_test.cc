// The Jinja engine construct by construct, its error messages (with the template line) and its
// render limits. tests/tokenizer/jinja/reference_test.cc compares whole templates with
// @huggingface/jinja.
#include <gtest/gtest.h>

#include "tokenizer/jinja/template.h"

namespace mlaserve::jinja {
namespace {

using nlohmann::ordered_json;

// Renders `source` with `vars` (a JSON object); failures come back as "ERROR: message".
std::string Render(std::string_view source, const ordered_json& vars = ordered_json::object(),
                   const RenderLimits& limits = {}) {
  auto t = Template::Parse(source);
  if (!t.ok()) return "ERROR: " + t.error();
  auto out = t->Render(Value::FromJson(vars), limits);
  return out.ok() ? *out : "ERROR: " + out.error();
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(Jinja, TextAndOutput) {
  EXPECT_EQ(Render("plain"), "plain");
  EXPECT_EQ(Render("a{{ x }}b", {{"x", "X"}}), "aXb");
  EXPECT_EQ(Render("{{ 1 + 2 }} {{ 'a' ~ 1 }} {{ \"q\" 'r' }}"), "3 a1 qr");
  EXPECT_EQ(Render("{{ none }} {{ true }} {{ 1.5 }} {{ 2.0 }} {{ [1, 'a'] }} {{ {'k': none} }}"),
            "None True 1.5 2.0 [1, 'a'] {'k': None}");
  EXPECT_EQ(Render("[{{ undefined_name }}]"), "[]");
  // Floats as Python's repr writes them.
  EXPECT_EQ(Render("{{ 0.0001 }} {{ 0.00001 }} {{ 1e15 }} {{ 1e16 }} {{ 123456789.123 }} {{ 0.1 + 0.2 }} {{ -2.5e-7 }}"),
            "0.0001 1e-05 1000000000000000.0 1e+16 123456789.123 0.30000000000000004 -2.5e-07");
  EXPECT_EQ(Render("{# comment #}x"), "x");
  EXPECT_EQ(Render("line\n"), "line");  // one trailing newline is dropped
}

TEST(Jinja, IfElifElse) {
  const char* t = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(Render(t, {{"n", 1}}), "one");
  EXPECT_EQ(Render(t, {{"n", 2}}), "two");
  EXPECT_EQ(Render(t, {{"n", 3}}), "many");
  EXPECT_EQ(Render("{% if x %}y{% endif %}"), "");
  EXPECT_EQ(Render("{{ 'a' if n > 1 else 'b' }}{{ 'c' if false }}", {{"n", 2}}), "a");
}

TEST(Jinja, ForWithLoopVariables) {
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ x }}{% if loop.first %}F{% endif %}"
                   "{% if loop.last %}L{% endif %}{{ loop.length }}{{ loop.revindex }};{% endfor %}",
                   {{"xs", {"a", "b"}}}),
            "10aF22;21bL21;");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"), "2/2 4/2 ");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1,a=2,");
  EXPECT_EQ(Render("{% for k in d %}{{ k }}{% endfor %}", {{"d", {{"z", 1}, {"y", 2}}}}), "zy");
  EXPECT_EQ(Render("{% for c in 'héllo' %}[{{ c }}]{% endfor %}"), "[h][é][l][l][o]");
  EXPECT_EQ(Render("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}"
                   "{% endif %}{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} {% endfor %}",
                   {{"xs", {1, 2, 3}}}),
            "<1>2 1<2>3 2<3> ");
}

TEST(Jinja, SetScopesAndNamespace) {
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(Render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"),
            "4");
  EXPECT_EQ(Render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(Render("{% set block %}in {{ 'side' }}{% endset %}[{{ block }}]"), "[in side]");
  EXPECT_EQ(Render("{% set d = {'a': 1} %}{% set d.a = 2 %}"),
            "ERROR: line 1: cannot assign attribute 'a' on 'd': not a namespace()");
}

TEST(Jinja, Macros) {
  EXPECT_EQ(Render("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }} {{ greet('Cy', 'Yo') }}"),
            "Hello, Ann! Hi, Bob! Yo, Cy!");
  EXPECT_EQ(Render("{% macro f(n) %}{{ n }}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "3210");
  EXPECT_EQ(Render("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}"), "ERROR: line 1: macro 'f' takes 1 arguments, got 2");
}

TEST(Jinja, Filters) {
  EXPECT_EQ(Render("{{ '  x  ' | trim }}|{{ 'a-b' | replace('-', '+') }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}"),
            "x|a+b|ABab");
  EXPECT_EQ(Render("{{ [1, 2, 3] | length }}{{ 'héllo' | length }}{{ {'a': 1} | count }}"), "351");
  EXPECT_EQ(Render("{{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }}{{ 'abc' | first }}"), "13a");
  EXPECT_EQ(Render("{{ ['a', 'b'] | join(', ') }}|{{ [1, 2] | join }}"), "a, b|12");
  EXPECT_EQ(Render("{{ x | default('d') }}{{ none | default('d') }}{{ '' | default('e', true) }}"), "dNonee");
  EXPECT_EQ(Render("{{ 12 | string ~ 'x' }}{{ '3' | int + 1 }}{{ 'x' | int }}{{ 2 | float }}"), "12x402.0");
  EXPECT_EQ(Render("{{ d | items | list }}", {{"d", {{"a", 1}}}}), "[['a', 1]]");
  const ordered_json people = {{"people", {{{"name", "a"}, {"admin", true}}, {{"name", "b"}, {"admin", false}}}}};
  EXPECT_EQ(Render("{{ people | selectattr('admin') | map(attribute='name') | join }}"
                   "{{ people | rejectattr('admin') | map(attribute='name') | join }}"
                   "{{ people | selectattr('name', 'equalto', 'b') | list | length }}"
                   "{{ people | map(attribute='missing', default='-') | join }}",
                   people),
            "ab1--");
  EXPECT_EQ(Render("{{ ['a', 'B'] | map('upper') | join }}{{ [1, 0, 2] | select | list }}{{ [1, 0] | reject | list }}"),
            "AB[1, 2][0]");
  EXPECT_EQ(Render("{{ [3, 1, 2] | sort | list }}{{ [1, 2] | reverse | list }}{{ [1, 1, 2] | unique | list }}"),
            "[1, 2, 3][2, 1][1, 2]");
  EXPECT_EQ(Render("{{ 'a\\nb' | indent(2) }}|{{ 'hello world' | title }}|{{ 'hI' | capitalize }}"), "a\n  b|Hello World|Hi");
  EXPECT_EQ(Render("{{ x | nope }}"), "ERROR: line 1: unknown filter 'nope'");
}

TEST(Jinja, ToJsonMatchesPythonJsonDumps) {
  const ordered_json vars = {{"v", {{"b", {1, 2.5, "é\"\n\x01"}}, {"a", nullptr}, {"t", true}}}};
  EXPECT_EQ(Render("{{ v | tojson }}", vars), R"({"b": [1, 2.5, "é\"\n\u0001"], "a": null, "t": true})");
  EXPECT_EQ(Render("{{ v | tojson(separators=(',', ':')) }}", vars), R"({"b":[1,2.5,"é\"\n\u0001"],"a":null,"t":true})");
  EXPECT_EQ(Render("{{ [1, {'x': []}] | tojson(indent=2) }}"), "[\n  1,\n  {\n    \"x\": []\n  }\n]");
  EXPECT_EQ(Render("{{ 2.0 | tojson }} {{ 1e100 | tojson }}"), "2.0 1e+100");
}

TEST(Jinja, Tests) {
  EXPECT_EQ(Render("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}"),
            "FalseTrueTrueTrueTrue");
  EXPECT_EQ(Render("{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ 1 is number }}{{ 3 is odd }}"),
            "TrueTrueFalseTrueTrue");
  EXPECT_EQ(Render("{{ 1 is not none }}{{ 6 is divisibleby 3 }}{{ 'a' is equalto 'a' }}{{ x is not defined and true }}"),
            "TrueTrueTrueTrue");
  EXPECT_EQ(Render("{{ 1 is weird }}"), "ERROR: line 1: unknown test 'weird'");
}

TEST(Jinja, StringAndDictMethods) {
  EXPECT_EQ(Render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ ' a '.strip() }}{{ 'xa'.lstrip('x') }}"),
            "TrueTrueaa");
  EXPECT_EQ(Render("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}"),
            "['a', 'b', '', 'c']['a', 'b']['a', 'b c']");
  EXPECT_EQ(Render("{{ 'aXa'.replace('a', 'b') }}{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ 'abcb'.find('b') }}"), "bXbABab1");
  EXPECT_EQ(Render("{{ d.get('a') }}{{ d.get('z', 'dflt') }}{{ d.get('z') }}{{ d.keys() | list }}{{ d.values() | list }}",
                   {{"d", {{"a", 1}}}}),
            "1dfltNone['a'][1]");
  EXPECT_EQ(Render("{{ 'x'.nope() }}"), "ERROR: line 1: a string value has no method 'nope'");
}

TEST(Jinja, ExpressionsAndSlicing) {
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 10 - 2 * 3 }} {{ (1 + 2) * 3 }}"),
            "3 -4 3.5 2 1024 4 9");
  EXPECT_EQ(Render("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1] }}{{ not 0 }}"),
            "TrueTrueTrueTrueTrue");
  EXPECT_EQ(Render("{{ 1 < 2 and 'a' < 'b' }}{{ 0 or 'x' }}{{ '' and 'y' }}|{{ 1 == 1.0 }}{{ [1] == [1] }}"),
            "Truex|TrueTrue");
  EXPECT_EQ(Render("{{ s[1:] }} {{ s[:-1] }} {{ s[::-1] }} {{ s[-2] }} {{ l[1:3] }} {{ l[::2] }} {{ l[9] is defined }}",
                   {{"s", "héllo"}, {"l", {0, 1, 2, 3}}}),
            "éllo héll olléh l [1, 2] [0, 2] False");
  EXPECT_EQ(Render("{{ m.role }}{{ m['role'] }}{{ l.0 }}", {{"m", {{"role", "user"}}}, {"l", {"z"}}}), "useruserz");
  EXPECT_EQ(Render("{{ 'ab' * 3 }}{{ [0] * 2 }}"), "ababab[0, 0]");
}

TEST(Jinja, WhitespaceControl) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before one goes.
  EXPECT_EQ(Render("{% if true %}\n  yes\n{% endif %}\nafter"), "  yes\nafter");
  EXPECT_EQ(Render("<ul>\n    {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n    {% endfor %}\n</ul>"),
            "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>");
  EXPECT_EQ(Render("a  \n  {%- if true -%}  \n  b  {%- endif %}"), "ab");
  EXPECT_EQ(Render("a {{- ' b ' -}} c"), "a b c");
  EXPECT_EQ(Render("x {{ 1 }}\ny"), "x 1\ny");  // no trimming after {{ }}
  EXPECT_EQ(Render("a {% if true %}b{% endif %}"), "a b");  // not alone on its line: kept
  EXPECT_EQ(Render("{# c #}\nx"), "x");
  EXPECT_EQ(Render("  {%+ if true %}x{% endif %}"), "  x");
}

TEST(Jinja, Globals) {
  EXPECT_EQ(Render("{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | list }}"),
            "[0, 1, 2][1, 3, 5][3, 2, 1]");
  const std::string year = Render("{{ strftime_now('%Y') }}");
  EXPECT_EQ(year.size(), 4u);
  EXPECT_EQ(year.substr(0, 2), "20");
  EXPECT_EQ(Render("a\n{{ raise_exception('bad role') }}"),
            "ERROR: line 2: the chat template refused the request: bad role");
}

TEST(Jinja, ParseErrorsNameTheLine) {
  EXPECT_EQ(Render("ok\n{% if x %}\nunclosed"), "ERROR: line 3: unexpected end of template, expected 'elif' or 'else' or 'endif'");
  EXPECT_EQ(Render("{{ 1 +\n}}"), "ERROR: line 2: unexpected '}}'");
  EXPECT_EQ(Render("a\n\n{% frobnicate %}"), "ERROR: line 3: unknown statement 'frobnicate'");
  EXPECT_EQ(Render("{{ 'abc }}"), "ERROR: line 1: unterminated string");
  EXPECT_EQ(Render("x\n{{ 1 "), "ERROR: line 2: unterminated '{{'");
  EXPECT_EQ(Render("{% for x in y %}{% endif %}"), "ERROR: line 1: unknown statement 'endif'");
  EXPECT_EQ(Render("{{ a b }}"), "ERROR: line 1: expected '}}', got 'b'");
  EXPECT_EQ(Render("{{ x $ y }}"), "ERROR: line 1: unexpected character '$'");
  // \u escapes: four hex digits to UTF-8; malformed or surrogate ones are errors, not crashes.
  EXPECT_EQ(Render("{{ '\\u00e9\\u4e2d' }}"), "\xC3\xA9\xE4\xB8\xAD");
  EXPECT_EQ(Render("{{ '\\uzzzz' }}"), "ERROR: line 1: bad \\u escape (four hex digits)");
  EXPECT_EQ(Render("{{ '\\u12' }}"), "ERROR: line 1: bad \\u escape (four hex digits)");
  EXPECT_EQ(Render("{{ '\\ud83d' }}"), "ERROR: line 1: \\u escape of a surrogate is not supported");
}

TEST(Jinja, RenderErrorsNameTheLine) {
  EXPECT_EQ(Render("\n\n{{ 'a' + 1 }}"), "ERROR: line 3: unsupported operand types for +: string and int");
  EXPECT_EQ(Render("{{ x.y }}"), "ERROR: line 1: cannot read 'y' of an undefined value");
  EXPECT_EQ(Render("{{ 1 // 0 }}"), "ERROR: line 1: division by zero");
  EXPECT_EQ(Render("{% for x in 3 %}{% endfor %}"), "ERROR: line 1: cannot iterate over a int value");
  EXPECT_EQ(Render("{{ nothing() }}"), "ERROR: line 1: 'nothing' is undefined");
}

TEST(Jinja, LimitsStopHostileTemplates) {
  RenderLimits small{.max_output_bytes = 1000, .max_steps = 10000, .max_call_depth = 8};
  EXPECT_EQ(Render("{% for i in range(100000) %}{% endfor %}", ordered_json::object(), small),
            "ERROR: line 1: the template built a list of more than " + std::to_string(1000 / sizeof(Value)) + " items");
  EXPECT_EQ(Render("{% for i in range(40) %}{% for j in range(40) %}{% for k in range(40) %}{% endfor %}{% endfor %}{% endfor %}",
                   ordered_json::object(), small),
            "ERROR: line 1: the template ran more than 10000 steps");
  EXPECT_EQ(Render("{% for i in range(40) %}{% for j in range(40) %}xyz{% endfor %}{% endfor %}", ordered_json::object(), small),
            "ERROR: line 1: the rendered prompt is larger than 1000 bytes");
  EXPECT_EQ(Render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", ordered_json::object(), small),
            "ERROR: line 1: macro calls nested deeper than 8");
  EXPECT_EQ(Render("{% set s = 'ab' %}{% for i in range(30) %}{% set s = s ~ s %}{% endfor %}", ordered_json::object(), small),
            "ERROR: line 1: the template built a value larger than 1000 bytes");
  EXPECT_EQ(Render("{{ 'x' * 100000000000 }}", ordered_json::object(), small), "ERROR: line 1: the template built a value larger than 1000 bytes");
  EXPECT_EQ(Render("{{ 2 ** 4000000000000 }}"), "ERROR: line 1: integer overflow: 2 ** 4000000000000");  // by squaring, no loop of that length
  // Copying a large string over and over is charged by its size.
  const RenderLimits copies{.max_output_bytes = 100000, .max_steps = 10000, .max_call_depth = 8};
  EXPECT_EQ(Render("{% set s = 'x' * 90000 %}{% for i in range(1000) %}{% set t = s ~ 'y' %}{% endfor %}",
                   ordered_json::object(), copies),
            "ERROR: line 1: the template ran more than 10000 steps");
  // Values nested without end, or holding themselves, are refused before anything recurses.
  EXPECT_EQ(Render("{% set x = [] %}{% for i in range(100000) %}{% set x = [x] %}{% endfor %}{{ x }}"),
            "ERROR: line 1: the template built lists or dicts nested deeper than 100");
  EXPECT_EQ(Render("{% set y = 1 %}{% for i in range(1000) %}{% set y = namespace(v=y) %}{% endfor %}"),
            "ERROR: line 1: the template built lists or dicts nested deeper than 100");
  EXPECT_EQ(Render("{% set ns = namespace(a=1) %}{% set ns.self = [1, {'k': ns}] %}{{ ns }}"),
            "ERROR: line 1: 'ns.self' would hold 'ns' itself");
  // Deep blocks inside deep macro recursion stay well within a thread's stack: the recursion
  // as a whole is bounded, whatever nests in what.
  const auto deep_macro = [](int calls) {
    return "{% macro g(n) %}{% if n > 0 %}" + Repeat("{% if true %}", 150) + "{{ g(n - 1) }}" + Repeat("{% endif %}", 150) +
           "{% endif %}{% endmacro %}{{ g(" + std::to_string(calls) + ") | length }}";
  };
  EXPECT_EQ(Render(deep_macro(8)), "0");
  EXPECT_EQ(Render(deep_macro(31)), "ERROR: line 1: the template nested expressions, blocks and macro calls deeper than 2000");
  // Deep nesting is a parse error, not a stack overflow.
  EXPECT_NE(Render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nesting deeper than"), std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 1000; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(Render(deep_ifs).find("nesting deeper than"), std::string::npos);
}

// Issue 24: each of these crashed the process, or grew without bound, before the budget.
TEST(Jinja, IntegerArithmeticIsChecked) {
  const ordered_json min_and_minus_one = {{"a", INT64_MIN}, {"b", -1}};
  EXPECT_EQ(Render("{{ a // b }}", min_and_minus_one), "ERROR: line 1: integer overflow: -9223372036854775808 // -1");
  EXPECT_EQ(Render("{{ a % b }}", min_and_minus_one), "0");  // Python: any int % -1 is 0
  EXPECT_EQ(Render("{{ a is divisibleby(b) }} {{ 7 is divisibleby(-1) }} {{ 7 is divisibleby(2) }}", min_and_minus_one),
            "True True False");
  EXPECT_EQ(Render("{{ (-9223372036854775807 - 1) // -1 }}"), "ERROR: line 1: integer overflow: -9223372036854775808 // -1");
  EXPECT_EQ(Render("{{ -a }}", min_and_minus_one), "ERROR: line 1: integer overflow: -(-9223372036854775808)");
  EXPECT_EQ(Render("{{ a | abs }}", min_and_minus_one), "ERROR: line 1: integer overflow: abs(-9223372036854775808)");
  EXPECT_EQ(Render("{{ 9223372036854775807 + 1 }}"), "ERROR: line 1: integer overflow: 9223372036854775807 + 1");
  EXPECT_EQ(Render("{{ a - 1 }}", min_and_minus_one), "ERROR: line 1: integer overflow: -9223372036854775808 - 1");
  EXPECT_EQ(Render("{{ 4294967296 * 4294967296 }}"), "ERROR: line 1: integer overflow: 4294967296 * 4294967296");
  EXPECT_EQ(Render("{{ [9223372036854775807, 1] | sum }}"), "ERROR: line 1: integer overflow in 'sum'");
  EXPECT_EQ(Render("{{ 7 // -2 }} {{ 7 % -2 }} {{ -7 % 2 }} {{ 3 ** 39 }} {{ (-2) ** 63 }}"),
            "-4 -1 1 4052555153018976267 -9223372036854775808");
  // int of a float: truncated within 64 bits, an error past them, the default for nan.
  EXPECT_EQ(Render("{{ f | int }}", {{"f", 1e300}}), "ERROR: line 1: 'int' of 1e+300: out of the 64-bit integer range");
  EXPECT_EQ(Render("{{ (f * f * 0) | int }}|{{ (f * f * 0) | int(7) }}", {{"f", 1e300}}), "0|7");  // inf * 0 is nan
  EXPECT_EQ(Render("{{ (f * f) | int }}", {{"f", 1e300}}), "ERROR: line 1: 'int' of inf: out of the 64-bit integer range");
  EXPECT_EQ(Render("{{ -2.7 | int }} {{ 9.2e18 | int }}"), "-2 9200000000000000000");
}

TEST(Jinja, RangesAndSlicesCountWithoutOverflow) {
  const ordered_json v = {{"lo", INT64_MIN}, {"hi", INT64_MAX}, {"big", int64_t{1} << 62}};
  EXPECT_EQ(Render("{{ range(lo, hi, big) | list }}", v),
            "[-9223372036854775808, -4611686018427387904, 0, 4611686018427387904]");
  EXPECT_EQ(Render("{{ range(hi - 1, hi, 1000) | list }}", v), "[9223372036854775806]");
  EXPECT_EQ(Render("{{ range(hi, lo, -hi) | list }}", v), "[9223372036854775807, 0, -9223372036854775807]");
  EXPECT_EQ(Render("{{ range(lo, hi) | length }}", v), "ERROR: line 1: the template built a list of more than " +
                                                             std::to_string((16u << 20) / sizeof(Value)) + " items");
  EXPECT_EQ(Render("{{ [1, 2, 3][::hi] }} {{ [1, 2, 3][::-hi] }} {{ 'héllo'[::hi] }} {{ [1, 2, 3][lo:hi] }}", v),
            "[1] [3] h [1, 2, 3]");
}

TEST(Jinja, EveryBuilderIsCheckedBeforeItBuilds) {
  const std::string too_large = "ERROR: line 1: the template built a value larger than 16777216 bytes";
  EXPECT_EQ(Render("{{ 'a\\nb' | indent(n) }}", {{"n", 3000000000}}), too_large);
  EXPECT_EQ(Render("{{ 'a\\nb' | indent(n) }}", {{"n", int64_t{1000000000000}}}), too_large);
  EXPECT_EQ(Render("{{ 'a\\nb' | indent(-1) }}|{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent('> ', true) }}"),
            "a\nb|a\n  b|> a\n> b");  // Python's ' ' * -1 is ''
  EXPECT_EQ(Render("{{ ('x' * 10000000) | replace('x', 'y' * 100000) | length }}"), too_large);
  EXPECT_EQ(Render("{{ ('x' * 10000000).replace('x', 'y' * 100000) | length }}"), too_large);
  EXPECT_EQ(Render("{{ ('ab' * 3) | replace('b', 'cd', 2) }}"), "acdacdab");
  // Lists holding the same list twice print exponentially: str() stops at the cap.
  EXPECT_EQ(Render("{% set ns = namespace(l=['x']) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}"
                   "{{ ns.l | string | length }}"),
            too_large);
  EXPECT_EQ(Render("{% set ns = namespace(l=['x']) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}"
                   "{{ ns.l }}"),
            too_large);
  EXPECT_EQ(Render("{% set ns = namespace(l=['x']) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}"
                   "{{ [ns.l] | join(',') | length }}"),
            too_large);
  // ...and compare in exponential time: == is charged per value compared.
  EXPECT_EQ(Render("{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}"
                   "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}"),
            "ERROR: line 1: the template ran more than 20000000 steps");
  EXPECT_EQ(Render("{% set l = [[1, 2]] %}{{ l == l }} {{ [l] == [l] }} {{ l[0] in [[1, 2]] }}"), "True True True");
  // A list of big strings shares them: repetition costs its items, not the strings' bytes.
  EXPECT_EQ(Render("{{ ([s] * 500000) | length }}", {{"s", std::string(1 << 20, 'x')}}), "500000");
  EXPECT_EQ(Render("{{ ('x,' * 8000000) | length }}"), "16000000");
  EXPECT_EQ(Render("{{ ('x,' * 8000000).split(',') | length }}"),
            "ERROR: line 1: the template built a list of more than " + std::to_string((16u << 20) / sizeof(Value)) + " items");
  EXPECT_EQ(Render("{{ ('a b' * 3).split() }} {{ 'a,b,c'.split(',', 1) }} {{ ' a  b '.split(None, 1) }}"),
            "['a', 'ba', 'ba', 'b'] ['a', 'b,c'] ['a', 'b ']");
}

TEST(Jinja, ARenderAllocatesWithinItsBudget) {
  // Each string is within the value cap, but together they pass the render's byte budget.
  EXPECT_EQ(Render("{% set ns = namespace(keep=[]) %}{% for i in range(100) %}"
                   "{% set ns.keep = ns.keep + [('x' * 10000000) ~ i] %}{% endfor %}{{ ns.keep | length }}"),
            "ERROR: line 1: the template allocated more than 134217728 bytes");
  // Doubling a list of shared references is bounded by the list cap, whatever its items hold.
  EXPECT_EQ(Render("{% set ns = namespace(l=[s]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
                   {{"s", std::string(1 << 20, 'x')}}),
            "ERROR: line 1: the template built a list of more than " + std::to_string((16u << 20) / sizeof(Value)) + " items");
}

TEST(Jinja, LongOperatorChainsAreParseErrors) {
  const std::string too_deep = "ERROR: line 1: an expression nested deeper than 256 operators";
  std::string sum = "{{ 1";
  for (int i = 0; i < 10000; ++i) sum += " + 1";
  EXPECT_EQ(Render(sum + " }}"), too_deep);
  EXPECT_EQ(Render("{{ 'x'" + Repeat("|trim", 30000) + " }}"), too_deep);
  EXPECT_EQ(Render("{{ x" + Repeat(".a", 30000) + " }}"), too_deep);
  EXPECT_EQ(Render("{{ x" + Repeat("[0]", 30000) + " }}"), too_deep);
  EXPECT_EQ(Render("{{ 1" + Repeat(" and 1", 200000) + " }}"), too_deep);
  EXPECT_EQ(Render("{{ 1" + Repeat(" < 1", 200000) + " }}"), too_deep);
  EXPECT_EQ(Render("{{ f" + Repeat("(1)", 30000) + " }}"), too_deep);
  EXPECT_EQ(Render("{{ ('x'" + Repeat(" ~ 'x'", 200) + ") | length }}"), "201");  // long, but within the bound
}

}  // namespace
}  // namespace mlaserve::jinja
