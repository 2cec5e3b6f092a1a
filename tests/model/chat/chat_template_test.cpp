// Unit tests of model/chat (the Jinja subset: whitespace control, statements,
// expressions, filters, tests, methods, limits and every refusal) and of
// model/modeld/chat_request (the RPC's conversation fields).
#include <gtest/gtest.h>

#include <string>

#include "model/chat/chat_template.h"
#include "model/modeld/methods/chat_request.h"

namespace gpubox::chat {
namespace {

using nlohmann::ordered_json;

Result<std::string> render(const std::string& source, const std::string& variables = "{}", const Limits& limits = {}) {
  auto t = ChatTemplate::parse(source, limits);
  if (!t) return t.status();
  return (*t)->render(ordered_json::parse(variables));
}

std::string value_of(Result<std::string> r) {
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r.value() : "<error>";
}

std::string ok(const std::string& source, const std::string& variables = "{}") {
  auto r = render(source, variables);
  EXPECT_TRUE(r.is_ok()) << source << " → " << r.status().message();
  return r.is_ok() ? *r : "<error>";
}

// The error of a template that must fail; checks the code and that the message has `part`.
void refused(const std::string& source, const std::string& part, const std::string& variables = "{}", const Limits& limits = {}) {
  auto r = render(source, variables, limits);
  ASSERT_FALSE(r.is_ok()) << source << " rendered " << *r;
  EXPECT_EQ(r.status().code(), ErrorCode::invalid_request) << r.status().message();
  EXPECT_NE(r.status().message().find(part), std::string::npos) << "message: " << r.status().message() << "\nwanted: " << part;
}

TEST(ChatWhitespace, TrimAndLstripBlocksAsTransformersSetsThem) {
  EXPECT_EQ(ok("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(ok("x\n    {% if true %}y{% endif %}"), "x\ny");
  EXPECT_EQ(ok("x  {% if true %}y{% endif %}"), "x  y");  // not at a line start: kept
  EXPECT_EQ(ok("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(ok("{% if true +%}\nA{% endif %}"), "\nA");
}

TEST(ChatWhitespace, DashesStripAllWhitespaceOnTheirSide) {
  EXPECT_EQ(ok("a \n {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(ok("a \n\t{%- if true -%}\n\n b {%- endif %}"), "ab");
  EXPECT_EQ(ok("a {#- note -#}  b"), "ab");
  EXPECT_EQ(ok("a{# comment {{ not rendered }} #}b"), "ab");
}

TEST(ChatWhitespace, OneTrailingNewlineDroppedAndCrlfRead) {
  EXPECT_EQ(ok("a\n"), "a");
  EXPECT_EQ(ok("a\n\n"), "a\n");
  EXPECT_EQ(ok("a\r\nb\rc"), "a\nb\nc");
}

TEST(ChatStatements, ForLoopVariables) {
  EXPECT_EQ(ok("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }},{% endfor %}",
               R"({"xs": ["a", "b"]})"),
            "01TrueFalse22,12FalseTrue21,");
  EXPECT_EQ(ok("{% for x in xs %}{{ loop.previtem | default('-') }}{{ x }}{{ loop.nextitem | default('-') }} {% endfor %}", R"({"xs": [1, 2, 3]})"),
            "-12 123 23- ");
}

TEST(ChatStatements, ForFilterElseBreakContinueUnpacking) {
  EXPECT_EQ(ok("{% for x in [1,2,3,4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"), "2/2 4/2 ");
  EXPECT_EQ(ok("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(ok("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "13");
  EXPECT_EQ(ok("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d": {"b": 1, "a": 2}})"), "b=1;a=2;");
  EXPECT_EQ(ok("{% for k in d %}{{ k }}{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %}", R"({"d": {"x": 1, "y": 2}})"), "xy[h][é]");
  EXPECT_EQ(ok("{% for x in undefined_name %}{{ x }}{% endfor %}done"), "done");
}

TEST(ChatStatements, ScopesAndNamespaces) {
  EXPECT_EQ(ok("{% set x = 1 %}{% for i in [1,2,3] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"), "2341");
  EXPECT_EQ(ok("{% set ns = namespace(x=1) %}{% for i in [1,2,3] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"), "7");
  EXPECT_EQ(ok("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(ok("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(ok("{% set block %}in {{ 1 + 1 }}{% endset %}[{{ block }}]"), "[in 2]");
}

TEST(ChatStatements, IfElifElse) {
  const char* t = "{% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}many{% endif %}";
  EXPECT_EQ(ok(t, R"({"x": 1})"), "one");
  EXPECT_EQ(ok(t, R"({"x": 3})"), "three");
  EXPECT_EQ(ok(t, R"({"x": 9})"), "many");
}

TEST(ChatStatements, MacrosWithDefaultsAndKeywords) {
  EXPECT_EQ(ok("{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}"), "<1B><12><43>");
  EXPECT_EQ(ok("{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{% for i in [1] %}{% set g = 'L' %}{{ m() }}{% endfor %}"), "G");
  EXPECT_EQ(ok("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(ChatExpressions, ArithmeticFollowsPython) {
  EXPECT_EQ(ok("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 10 / 4 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ -2 ** 2 }}"),
            "3 -4 1 2 -2 2.5 2.0 1024 4");
  EXPECT_EQ(ok("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 3 * 1.0 }} {{ 1e16 }} {{ 123456789.125 }}"),
            "0.30000000000000004 1e+20 1.5e-07 3.0 1e+16 123456789.125");
  EXPECT_EQ(ok("{{ 'ab' * 2 }}{{ 'a' + 'b' }}{{ 1 ~ 'x' ~ none }}{{ [1] + [2] }}"), "ababab1xNone[1, 2]");
  EXPECT_EQ(ok("{{ true + 1 }} {{ -x }} {{ +3 }}", R"({"x": 2.5})"), "2 -2.5 3");
}

TEST(ChatExpressions, ComparisonsLogicAndMembership) {
  EXPECT_EQ(ok("{{ 1 < 2 <= 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ [1, 2] == [1, 2] }} {{ none == none }} {{ 'x' != 'y' }}"),
            "True True True True True True True");
  EXPECT_EQ(ok("{{ 0 or 'b' }} {{ 'a' and 'b' }} {{ not [] }} {{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}"),
            "b b True True True True True");
  EXPECT_EQ(ok("{{ 'y' if x else 'n' }}|{{ 'y' if not x }}|", R"({"x": 0})"), "n|y|");
  EXPECT_EQ(ok("{{ 'y' if x }}|", R"({"x": 0, "z": 1})"), "|");
}

TEST(ChatExpressions, LiteralsPrintAsPython) {
  EXPECT_EQ(ok("{{ none }} {{ True }} {{ false }} {{ [1, 'a', none, 1.5, {'k': true}] }} {{ {'q': \"it's\"} }} {{ (1, 2) }} {{ 'a' 'b' }}"),
            "None True False [1, 'a', None, 1.5, {'k': True}] {'q': \"it's\"} [1, 2] ab");
  EXPECT_EQ(ok("{{ x }}|{{ y }}", R"({"x": {"a": [1, {"b": null}]}, "y": "s"})"), "{'a': [1, {'b': None}]}|s");
  EXPECT_EQ(ok("{{ 'tab\\there' }}{{ \"q\\\"\" }}"), "tab\there" "q\"");
}

TEST(ChatExpressions, SubscriptsAndSlices) {
  const char* xs = R"({"xs": [0, 1, 2, 3, 4], "s": "héllo", "d": {"a": {"b": 7}}})";
  EXPECT_EQ(ok("{{ xs[0] }}{{ xs[-1] }}{{ xs[1:3] }}{{ xs[::-1] }}{{ xs[::2] }}{{ xs[-2:] }}{{ xs[:100] }}", xs),
            "04[1, 2][4, 3, 2, 1, 0][0, 2, 4][3, 4][0, 1, 2, 3, 4]");
  EXPECT_EQ(ok("{{ s[1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[-1] }}", xs), "éélolléh" "o");
  EXPECT_EQ(ok("{{ d.a.b }}{{ d['a']['b'] }}{{ d.missing is defined }}{{ xs[10] is defined }}{{ xs.0 }}", xs), "77FalseFalse0");
}

TEST(ChatFilters, Strings) {
  EXPECT_EQ(ok("[{{ '  a b \\n' | trim }}][{{ 'xxaxx' | trim('x') }}]{{ 'Ab' | upper }}{{ 'Ab' | lower }}{{ 'hello world' | title }}{{ 'hELLO' | capitalize }}"),
            "[a b][a]ABabHello WorldHello");
  EXPECT_EQ(ok("{{ 'a-b-c' | replace('-', '+') }} {{ 'a-b-c' | replace('-', '', 1) }} {{ '<&>' | e }} {{ 'Ünï' | upper }} {{ 'x' | safe }}"),
            "a+b+c ab-c &lt;&amp;&gt; ÜNÏ x");
  EXPECT_EQ(ok("{{ 'a\\nb' | indent(2) }}|{{ 'a\\n\\nb' | indent(2, true) }}"), "a\n  b|  a\n\n  b");
}

TEST(ChatFilters, Sequences) {
  const char* v = R"({"ms": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}, {"role": "user", "content": "c"}]})";
  EXPECT_EQ(ok("{{ ms | length }}{{ 'hé' | length }}{{ {'a': 1} | length }}{{ ms | count }}", v), "3213");
  EXPECT_EQ(ok("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}", v), "a,c");
  EXPECT_EQ(ok("{{ ms | rejectattr('role', 'equalto', 'user') | map(attribute='content') | list }}", v), "['b']");
  EXPECT_EQ(ok("{{ (ms | first).content }}{{ (ms | last).content }}{{ ms | map(attribute='role') | unique | join }}", v), "acuserbot");
  EXPECT_EQ(ok("{{ [1, 0, 2] | select | list }}{{ [1, 2, 3] | reject('odd') | list }}{{ ['a', 'b'] | map('upper') | join }}"), "[1, 2][2]AB");
  EXPECT_EQ(ok("{{ [3, 1] | reverse | list }}{{ 'abc' | reverse }}{{ {'a': 1} | items | list }}{{ 'ab' | list }}{{ ms | join(', ', attribute='role') }}", v),
            "[1, 3]cba[['a', 1]]['a', 'b']user, bot, user");
}

TEST(ChatFilters, DefaultStringNumbers) {
  EXPECT_EQ(ok("{{ x | default('d') }}{{ '' | default('e') }}{{ '' | default('f', true) }}{{ none | default('g') }}"), "dfNone");
  EXPECT_EQ(ok("{{ 3 | string }}{{ [1] | string }}{{ '12' | int + 1 }}{{ 'x' | int }}{{ '2.5' | float }}{{ 2.9 | int }}{{ -3 | abs }}"),
            "3[1]1302.523");
}

TEST(ChatFilters, TojsonLikePythonJsonDumps) {
  const char* v = R"({"t": {"name": "f", "n": [1, 2.5, true, null], "s": "q\"\\\n\u00e9\u0001", "e": {}, "l": []}})";
  EXPECT_EQ(ok("{{ t | tojson }}", v), R"({"name": "f", "n": [1, 2.5, true, null], "s": "q\"\\\né\u0001", "e": {}, "l": []})");
  EXPECT_EQ(ok("{{ t.n | tojson(indent=2) }}", v), "[\n  1,\n  2.5,\n  true,\n  null\n]");
  EXPECT_EQ(ok("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}{{ [1, 2] | tojson(separators=(',', ':')) }}"), R"({"a": 2, "b": 1}[1,2])");
}

TEST(ChatTests, TypeAndValueTests) {
  EXPECT_EQ(ok("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 1 is number }}",
               R"({"x": 1})"),
            "TrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(ok("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ false is sameas false }}{{ 1 is eq 1 }}{{ 1 is not string }}"),
            "TrueTrueTrueFalseTrueTrueTrue");
  EXPECT_EQ(ok("{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 'ab' is lower }}{{ 2 is gt 1 }}{{ 'a' is in 'abc' }}{{ raise_exception is callable }}"),
            "TrueTrueTrueTrueTrueTrueTrue");
}

TEST(ChatMethods, StringAndDictMethods) {
  EXPECT_EQ(ok("[{{ '\\n x \\n'.strip() }}][{{ '\\nx\\n'.lstrip('\\n') }}][{{ 'xy..'.rstrip('.') }}]"), "[x][x\n][xy]");
  EXPECT_EQ(ok("{{ 'a</think>b</think>c'.split('</think>')[-1] }}{{ 'a b  c'.split() }}{{ 'a,b,c'.split(',', 1) }}"), "c['a', 'b', 'c']['a', 'b,c']");
  EXPECT_EQ(ok("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}{{ 'a.b'.replace('.', '/') }}{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"),
            "TrueTruea/bABab");
  EXPECT_EQ(ok("{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 0) }}{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}", R"({"d": {"a": 1}})"),
            "1None0['a'][1][['a', 1]]");
  EXPECT_EQ(ok("{{ ', '.join(['a', 'b']) }} {{ 'abcb'.find('b') }} {{ 'abcb'.count('b') }} {{ ' '.isspace() }} {{ [5, 6].index(6) }}"), "a, b 1 2 True 1");
}

TEST(ChatGlobals, NamespaceRangeDictRaise) {
  EXPECT_EQ(ok("{{ range(3) | list }}{{ range(1, 7, 3) | list }}{{ range(3, 0, -1) | list }}{{ dict(a=1) }}{{ namespace(a=1).a }}"),
            "[0, 1, 2][1, 4][3, 2, 1]{'a': 1}1");
  refused("{{ raise_exception('Roles must alternate') }}", "chat template raised: Roles must alternate");
  EXPECT_FALSE(ok("{{ strftime_now('%Y') }}").empty());
}

// Every construct outside the subset, and every error of the template's own
// logic, is a clear invalid_request naming the line and column.
TEST(ChatRefusals, UnsupportedStatements) {
  for (const char* stmt : {"include 'x'", "import 'x' as y", "extends 'x'", "block b", "call m()", "filter upper", "with x = 1", "raw", "do x"}) {
    refused(std::string("a\n  {% ") + stmt + " %}", "line 2, column 6: \"{% " + std::string(stmt).substr(0, std::string(stmt).find(' ')) + " %}\" is not supported");
  }
  refused("{% frobnicate %}", "unknown statement \"frobnicate\"");
  refused("{% for x in y recursive %}{% endfor %}", "recursive for loops are not supported");
  refused("{% break %}", "\"break\" outside a for loop");
}

TEST(ChatRefusals, SyntaxErrorsNameTheirPlace) {
  refused("ab{{ x ", "line 1, column 3: unterminated \"{{\"");
  refused("{% if x %}", "missing \"{% endif %}\"");
  refused("{% for x in y %}", "missing \"{% endfor %}\"");
  refused("{{ 'abc }}", "unterminated string");
  refused("{# never closed", "unterminated comment");
  refused("{{ x $ y }}", "unexpected character '$'");
  refused("{{ x y }}", "expected \"}}\", found \"y\"");
  refused("{{ (1 }}", "line 1, column 1: unterminated \"{{\"");
  refused("{{ f(1 }}x", "unterminated \"{{\" (a bracket is not closed)");
  refused("{{ (1) ] }}", "expected \"}}\", found \"]\"");
  refused("{{ [1 2] }}", "expected \",\", found \"2\"");
  refused("{{ x[] }}", "empty subscript");
  refused("{{ x[1:2:3:4] }}", "at most two colons");
  refused("{% set %}", "expected a name");
  refused("{% macro m(a b) %}{% endmacro %}", "expected \",\", found \"b\"");
  refused("{{ m(a=1, 2) }}", "a positional argument after a keyword argument");
  refused("{{ 99999999999999999999 }}", "integer literal out of range");
  refused("{{ x is 3 }}", "expected a test name");
}

TEST(ChatRefusals, RenderErrorsNameTheirPlace) {
  refused("\n\n  {{ x | frob }}", "line 3, column 8: unknown filter \"frob\"");
  refused("{{ x is frob }}", "unknown test \"frob\"");
  refused("{{ m.role }}", "\"m\" is undefined (reading .role)");
  refused("{{ messages[0].role }}", "is undefined (reading .role)", R"({"messages": []})");
  refused("{{ f() }}", "\"f\" is undefined (called as a function)");
  refused("{{ 'x'.frob() }}", "'str' object has no method \"frob\"");
  refused("{{ xs.append(1) }}", "lists are immutable", R"({"xs": []})");
  refused("{% set d = {} %}{% set d.a = 1 %}", "it is not a namespace()");
  refused("{% set ns = namespace() %}{% set ns._a = 1 %}", "may not start with \"_\"");
  refused("{{ namespace(_a=1) }}", "may not start with \"_\"");
  refused("{{ 1 / 0 }}", "division by zero");
  refused("{{ 1 // 0 }}", "division by zero");
  refused("{{ 9223372036854775807 + 1 }}", "integer overflow");
  refused("{{ 'a' + 1 }}", "unsupported operand types for +: 'str' and 'int'");
  refused("{{ x + 1 }}", "\"x\" is undefined");
  refused("{{ 1 < 'a' }}", "'<' not supported between 'int' and 'str'");
  refused("{% for x in 3 %}{% endfor %}", "'int' object is not iterable");
  refused("{% for x in none %}{% endfor %}", "'NoneType' object is not iterable");
  refused("{% set a, b = [1] %}", "cannot unpack 1 values into 2 names");
  refused("{{ 1 in 2 }}", "argument of type 'int' is not iterable");
  refused("{{ 3 | length }}", "has no len()");
  refused("{{ x | tojson }}", "tojson: \"x\" is undefined");
  refused("{{ 1 | tojson(ensure_ascii=true) }}", "ensure_ascii=true is not supported");
  refused("{{ 1 | tojson(colour=1) }}", "unknown argument \"colour\"");
  refused("{{ 5 | trim }}", "filter \"trim\" expects a string, not 'int'");
  refused("{{ ''.split('') }}", "empty separator");
  refused("{{ range(1, 2, 0) }}", "step must not be zero");
  refused("{{ [1][::0] }}", "slice step cannot be zero");
  refused("{{ 'abc'['x'] is defined }}{{ 'abc'[1.5] }}", "str indices must be integers, not 'float'");
  refused("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "macro \"m\" takes 1 arguments, 2 given");
  refused("{% macro m(a) %}{% endmacro %}{{ m(b=2) }}", "macro \"m\" has no argument \"b\"");
}

TEST(ChatRefusals, LimitsStopHostileTemplates) {
  Limits small;
  small.max_output_bytes = 1000;
  small.max_iterations = 100;
  small.max_items = 500;
  small.max_template_bytes = 200;
  refused("{% for i in range(50) %}{{ 'x' * 30 }}{% endfor %}", "the output would exceed 1000 bytes", "{}", small);
  refused("{% for i in range(60) %}{% for j in range(60) %}{% endfor %}{% endfor %}", "more than 100 loop iterations", "{}", small);
  refused("{{ range(100000) | list | length }}", "more than 500 list and dict elements", "{}", small);
  refused(std::string(300, 'x'), "300 bytes is over the limit of 200", "{}", small);
  refused("{{ 'x' * 100000 }}", "a string would exceed 1000 bytes", "{}", small);
  refused("{% set ns = namespace(s='x') %}{% for i in range(20) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "a string would exceed 1000 bytes", "{}", small);
  refused("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}", "nests deeper than 200 levels");
  refused("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", "macro calls nest deeper than 16");
  // A namespace that holds itself prints as an error, not an endless recursion.
  refused("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}", "nests deeper than 32 levels");
  refused("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns | tojson }}", "nests deeper than 64 levels");
  refused("{% set a = namespace() %}{% set a.me = [a] %}{% set b = namespace() %}{% set b.me = [b] %}{{ [a] == [b] }}", "a comparison nests deeper than 64 levels");
  EXPECT_EQ(ok("{{ '' * 9223372036854775807 }}|{{ [1, 2][::9223372036854775807] }}"), "|[1]");
}

TEST(ChatTemplates, ConfigSpecialTokensAndNamedTemplates) {
  auto t = ChatTemplates::from_config(R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null,
    "chat_template": [{"name": "default", "template": "{{ bos_token }}D{{ messages | length }}{{ eos_token }}"},
                      {"name": "tool_use", "template": "T{{ tools | length }}"}]})",
                                      std::nullopt);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_TRUE((*t)->has_template());
  EXPECT_EQ((*t)->names(), (std::vector<std::string>{"default", "tool_use"}));
  ordered_json msgs = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(value_of((*t)->apply(msgs, nullptr, false, ordered_json::object())), "<s>D1</s>");
  EXPECT_EQ(value_of((*t)->apply(msgs, ordered_json::parse("[{}, {}]"), false, ordered_json::object())), "T2");
  EXPECT_EQ(value_of((*t)->apply(msgs, nullptr, false, ordered_json::parse(R"({"bos_token": "B"})"))), "BD1</s>");
  auto unknown = (*t)->apply(msgs, nullptr, false, ordered_json::object(), "rag");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().message(), "no chat template named \"rag\" (the model has: default, tool_use)");
}

TEST(ChatTemplates, JinjaFileWinsAndBadConfigsAreNamed) {
  auto t = ChatTemplates::from_config(R"({"chat_template": "config"})", std::string_view("jinja file"));
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(value_of((*t)->apply(ordered_json::parse(R"([{"role": "user"}])"), nullptr, false, ordered_json::object())), "jinja file");
  auto none = ChatTemplates::from_config(R"({"bos_token": "<s>"})", std::nullopt);
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE((*none)->has_template());
  auto r = (*none)->apply(ordered_json::parse(R"([{"role": "user"}])"), nullptr, false, ordered_json::object());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("has no chat template"), std::string::npos);
  auto bad = ChatTemplates::from_config(R"({"chat_template": "{% if %}"})", std::nullopt);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "tokenizer_config.json: chat_template: chat_template: line 1, column 7: expected a value, found \"%}\"");
  EXPECT_FALSE(ChatTemplates::from_config("not json", std::nullopt).is_ok());
  EXPECT_FALSE(ChatTemplates::from_config(R"({"chat_template": 5})", std::nullopt).is_ok());
  EXPECT_FALSE(ChatTemplates::from_config(R"({"chat_template": [{"name": 1}]})", std::nullopt).is_ok());
  EXPECT_FALSE(ChatTemplates::from_config(R"({"bos_token": 3})", std::nullopt).is_ok());
}

TEST(ChatTemplates, ConversationChecksAndReasoningAliases) {
  auto t = ChatTemplates::from_config(R"({"chat_template": "{% for m in messages %}{{ m | tojson }}{% endfor %}"})", std::nullopt);
  ASSERT_TRUE(t.is_ok());
  auto apply = [&](const char* messages, const char* kwargs = "{}") {
    return (*t)->apply(ordered_json::parse(messages), nullptr, false, ordered_json::parse(kwargs));
  };
  EXPECT_EQ(value_of(apply(R"([{"role": "assistant", "content": "A", "reasoning": "r"}])")),
            R"({"thinking": "r", "role": "assistant", "content": "A", "reasoning": "r", "reasoning_content": "r"})");
  EXPECT_EQ(apply("[]").status().message(), "messages: the conversation is empty (give at least one message)");
  EXPECT_EQ(apply(R"(["hi"])").status().message(), "messages[0]: expected an object");
  EXPECT_EQ(apply(R"({"role": "user"})").status().message(), "messages: expected a list of {role, content} objects");
  EXPECT_EQ(apply(R"([{}])", R"({"messages": 1})").status().message(), "chat template arguments: \"messages\" is given separately");
}

TEST(ChatRequest, ReadsFieldsKeepsKeyOrderAndBatches) {
  // JSON text keeps the order of keys that a decoded msgpack map (sorted) loses.
  nlohmann::json params = {{"messages", R"([{"role": "user", "content": "x", "b": 1, "a": 2}])"}, {"add_generation_prompt", true},
                           {"template_kwargs", {{"enable_thinking", false}}}};
  rpc::ParamReader reader(params);
  auto request = modeld::read_chat_request(reader, false);
  ASSERT_TRUE(request.is_ok()) << request.status().message();
  ASSERT_TRUE(request->has_value());
  EXPECT_TRUE(reader.finish().is_ok());
  EXPECT_EQ((*request)->conversations.at(0).dump(), R"([{"role":"user","content":"x","b":1,"a":2}])");
  EXPECT_TRUE((*request)->add_generation_prompt);
  EXPECT_FALSE((*request)->batched);
  EXPECT_EQ((*request)->kwargs.dump(), R"({"enable_thinking":false})");

  nlohmann::json batch = {{"messages", {{{{"role", "user"}}}, {{{"role", "user"}}}}}};
  rpc::ParamReader batch_reader(batch);
  auto batched = modeld::read_chat_request(batch_reader, true);
  ASSERT_TRUE(batched.is_ok());
  EXPECT_TRUE((*batched)->batched);
  EXPECT_EQ((*batched)->conversations.size(), 2u);
  EXPECT_TRUE((*batched)->add_generation_prompt);
  auto texts = modeld::render_chat(nullptr, **batched, "m");
  ASSERT_FALSE(texts.is_ok());
  EXPECT_EQ(texts.status().message(), "model \"m\" has no chat template (tokenizer_config.json has no chat_template): send text or ids");
}

TEST(ChatRequest, RefusesMalformedFields) {
  auto error = [](nlohmann::json params) {
    rpc::ParamReader reader(params);
    auto r = modeld::read_chat_request(reader, false);
    return r.is_ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_EQ(error({{"messages", "[not json"}}), "params.messages: not valid JSON text");
  EXPECT_EQ(error({{"messages", 3}}), "params.messages: expected a list of {role, content} objects");
  EXPECT_EQ(error({{"messages", {{{"role", "user"}}, {1}}}}), "ok");  // not a batch: the template sees it
  EXPECT_EQ(error({{"messages", nlohmann::json::array({nlohmann::json::array(), 1})}}), "params.messages[1]: expected a list of messages");
  EXPECT_EQ(error({{"messages", "[]"}, {"tools", {{"a", 1}}}}), "params.tools: expected a list of tool schemas");
  EXPECT_EQ(error({{"messages", "[]"}, {"template_kwargs", "[1]"}}), "params.template_kwargs: expected an object");
  EXPECT_EQ(error({{"messages", "[]"}, {"add_generation_prompt", "yes"}}).rfind("params.add_generation_prompt", 0), 0u);
  nlohmann::json none = {{"text", "x"}};
  rpc::ParamReader reader(none);
  auto r = modeld::read_chat_request(reader, false);
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->has_value());
}

}  // namespace
}  // namespace gpubox::chat
