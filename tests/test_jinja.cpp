// The Jinja interpreter (src/tokenizer/jinja): each construct with the output jinja2 gives it
// in transformers' environment (trim_blocks, lstrip_blocks; expected texts checked with
// python3-jinja2), errors that name the construct and line, the limits, and taint: every
// byte of the output that came from a tainted input string is reported, and no other.
// tests/chat_template_jinja_test.py compares whole real templates with jinja2.
#include <gtest/gtest.h>

#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/template.h"

namespace infercept::jinja {
namespace {

// Renders `src` with the JSON object `ctx` as variables (strings untainted).
Result<std::string> try_render(const std::string& src, const std::string& ctx = "{}",
                               RenderOptions o = {}) {
  TRY_ASSIGN(Template t, Template::parse(src));
  TRY_ASSIGN(Value c, from_json(ctx, false));
  TRY_ASSIGN(Str out, t.render(c.dict(), o));
  return out.text;
}

std::string render(const std::string& src, const std::string& ctx = "{}") {
  auto r = try_render(src, ctx);
  EXPECT_TRUE(r.ok()) << src << ": " << r.error().message;
  return r.ok() ? *r : "<error>";
}

std::string error_of(const std::string& src, const std::string& ctx = "{}", RenderOptions o = {}) {
  auto r = try_render(src, ctx, o);
  EXPECT_FALSE(r.ok()) << src << " rendered " << (r.ok() ? *r : "");
  return r.ok() ? "" : r.error().message;
}

TEST(Jinja, OutputsAndLiterals) {
  EXPECT_EQ(render("a{{ 1 }}b{{ 'x' }}{{ \"y\" 'z' }}"), "a1bxyz");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ False }} {{ 2.0 }} {{ 1e20 }} {{ 1.5e-7 }}"),
            "None True False 2.0 1e+20 1.5e-07");
  EXPECT_EQ(render("{{ [1, 'a', none, true, {'k': \"it's\"}] }}"),
            "[1, 'a', None, True, {'k': \"it's\"}]");
  EXPECT_EQ(render("{{ '\\n\\t\\u00e9\\\\' }}"), "\n\t\xC3\xA9\\");
  EXPECT_EQ(render("{{ x }}|{{ x.y is defined }}", R"({"x": {"z": 1}})"), "{'z': 1}|False");
  EXPECT_EQ(render("{# comment #}ok"), "ok");
  EXPECT_EQ(render("{% raw %}{{ not rendered }}{% endraw %}"), "{{ not rendered }}");
}

TEST(Jinja, Arithmetic) {
  EXPECT_EQ(render("{{ 7/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7%3 }} {{ 2**10 }} {{ 0.1+0.2 }}"),
            "3.5 3 -4 2 1024 0.30000000000000004");
  EXPECT_EQ(render("{{ 'ab' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ -(3) }}"),
            "ab1None abab [1, 2] -3");
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ true == 1 }} {{ {'a': 1} == {'a': 1} }} {{ 2 < 3 }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not 0 }} {{ 'a' if false else 'b' }}"),
            "x y True b");
  EXPECT_EQ(render("[{{ 'a' if false }}]"), "[]");
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("division"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
}

TEST(Jinja, SubscriptsAndSlices) {
  const char* ctx = R"({"m": [{"role": "a"}, {"role": "b"}, {"role": "c"}], "s": "héllo"})";
  EXPECT_EQ(render("{{ m[0]['role'] }}{{ m[-1].role }}{{ m[1:]|length }}", ctx), "ac2");
  EXPECT_EQ(render("{% for x in m[::-1] %}{{ x.role }}{% endfor %}", ctx), "cba");
  EXPECT_EQ(render("{{ s[::-1] }}|{{ s[1:3] }}|{{ s[-1] }}|{{ s|length }}", ctx), "olléh|él|o|5");
  EXPECT_EQ(render("{{ m[5] is defined }}{{ m[0].nope is defined }}", ctx), "FalseFalse");
}

TEST(Jinja, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the blanks before it.
  EXPECT_EQ(render("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(render("x  {%- if true -%}  y  {%- endif %}"), "xy");
  EXPECT_EQ(render("a\n  {{- 'b' -}}  \nc"), "abc");
  EXPECT_EQ(render("a  {%+ if true %}b{% endif %}"), "a  b");
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}\n"), "a\nb");  // one trailing newline dropped
  EXPECT_EQ(render("line\r\nnext"), "line\nnext");
}

TEST(Jinja, Loops) {
  const char* ctx = R"({"xs": ["a", "b", "c"], "d": {"k1": 1, "k2": 2}})";
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ x }}"
                   "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}"
                   "{{ loop.length }}{{ loop.revindex }},{% endfor %}",
                   ctx),
            "01aF33,12b32,23cL31,");
  EXPECT_EQ(render("{% for x in xs if x != 'b' %}{{ x }}{{ loop.length }}{% endfor %}", ctx),
            "a2c2");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx), "k1=1;k2=2;");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}", ctx), "k1k2");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{{ x }}"
                   "{% if x == 'c' %}{% break %}{% endif %}{% endfor %}",
                   ctx),
            "ac");
  EXPECT_EQ(
      render("{% for x in xs %}{{ loop.previtem }}{{ loop.cycle('-', '+') }}{% endfor %}", ctx),
      "-a+b-");
}

TEST(Jinja, ScopesAndNamespaces) {
  // A set inside a loop body lives for that iteration; namespace() attributes persist.
  EXPECT_EQ(
      render("{% set x = 'a' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{% endfor %}{{ x }}"),
      "aaa");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% if true %}{% set y = 1 %}{% endif %}{{ y }}"), "1");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set t %}in{{ 1 }}{% endset %}[{{ t }}]"), "[in1]");
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.y = 2 %}").find("not a namespace"),
            std::string::npos);
}

TEST(Jinja, Macros) {
  EXPECT_EQ(render("{% macro m(a, b=2) %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, b=5) }}"
                   "{{ m(b=3, a=4) }}"),
            "[12][15][43]");
  EXPECT_EQ(render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}body{% endcall %}"),
            "<body>");
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                   "{{ f(3) }}"),
            "321");
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nest deeper"),
            std::string::npos);
  // A macro that outlives its scope (kept in a namespace past its loop iteration).
  EXPECT_EQ(render("{% set ns = namespace() %}{% for i in [1] %}{% macro m() %}x{% endmacro %}"
                   "{% set ns.m = m %}{% endfor %}{{ ns.m() }}"),
            "x");
  // A namespace holding itself renders and is freed (the sanitizer build checks leaks).
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me is defined }}"), "True");
}

TEST(Jinja, Filters) {
  const char* ctx = R"({"m": [{"role": "user", "c": "B"}, {"role": "tool", "c": "a"},
                              {"role": "user", "c": "a"}],
                        "j": {"b": [1, 2.5, null], "a": "é\"\n"}})";
  EXPECT_EQ(render("{{ j|tojson }}", ctx), R"({"b": [1, 2.5, null], "a": "é\"\n"})");
  EXPECT_EQ(render("{{ j.b|tojson(indent=2) }}", ctx), "[\n  1,\n  2.5,\n  null\n]");
  EXPECT_EQ(render("{{ j|tojson(sort_keys=true, ensure_ascii=true) }}", ctx),
            R"({"a": "\u00e9\"\n", "b": [1, 2.5, null]})");
  // json.dumps escapes DEL too with ensure_ascii (everything outside ' '..'~'), and a
  // character past the BMP as a surrogate pair; without it, both stand for themselves.
  EXPECT_EQ(render("{{ s|tojson(ensure_ascii=true) }}", R"({"s": "a\u007f\ud83d\ude00"})"),
            R"("a\u007f\ud83d\ude00")");
  EXPECT_EQ(render("{{ s|tojson }}", R"({"s": "a\u007f"})"), "\"a\x7f\"");
  EXPECT_EQ(
      render("{{ m|selectattr('role', 'equalto', 'user')|map(attribute='c')|join(',') }}", ctx),
      "B,a");
  EXPECT_EQ(render("{{ m|rejectattr('role', 'equalto', 'user')|list|length }}", ctx), "1");
  EXPECT_EQ(render("{{ m|map(attribute='c')|unique|list }}", ctx), "['B', 'a']");
  EXPECT_EQ(render("{{ j|dictsort|first }} {{ j|items|last|first }}", ctx), "('a', 'é\"\\n') a");
  EXPECT_EQ(render("{{ '  x  '|trim }}|{{ 'hello world'|title }}|{{ 'aBC'|capitalize }}|"
                   "{{ 'x'|upper }}{{ 'Y'|lower }}|{{ 'aXa'|replace('a', 'b') }}"),
            "x|Hello World|Abc|Xy|bXb");
  EXPECT_EQ(render("{{ u|default('d') }}{{ ''|default('e', true) }}{{ '7'|int + 1 }}"
                   "{{ 3|string ~ 'x' }}{{ [3, 1, 2]|sort|first }}{{ [1, 2]|sum }}"),
            "de83x13");
  EXPECT_EQ(render("{{ '<a & \"b\">'|e }}"), "&lt;a &amp; &#34;b&#34;&gt;");
  EXPECT_EQ(render("{{ 'x'|safe + '<' }}"), "x&lt;");  // Markup + str escapes the str
  EXPECT_EQ(render("{{ none|selectattr('x')|list }}"), "[]");
}

TEST(Jinja, TestsAndMethods) {
  EXPECT_EQ(render("{{ u is defined }}{{ u is undefined }}{{ none is none }}{{ 'a' is string }}"
                   "{{ {} is mapping }}{{ 'a' is iterable }}{{ 3 is number }}{{ true is boolean }}"
                   "{{ false is false }}{{ 1 is true }}{{ 4 is divisibleby 2 }}{{ 3 is odd }}"),
            "FalseTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrue");
  EXPECT_EQ(render("{{ ' a b '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' x  y '.split() }}|"
                   "{{ 'xxaxx'.lstrip('x') }}|{{ 'abc'.startswith('ab') }}"
                   "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|"
                   "{{ 'a-b c'.title() }}|{{ 'aa'.replace('a', 'b', 1) }}"),
            "a b|['a', 'b', '', 'c']|['x', 'y']|axx|TrueTrue|ABab|A-B C|ba");
  EXPECT_EQ(render("{{ d.get('k') }}{{ d.get('z', 0) }}{{ d.keys()|list }}{{ d.values()|list }}",
                   R"({"d": {"k": 1}})"),
            "10['k'][1]");
  // transformers renders in an immutable sandbox: mutating a list is an error when it runs.
  EXPECT_NE(error_of("{% set l = [] %}{{ l.append(1) }}").find("unsafe"), std::string::npos);
  EXPECT_EQ(render("{% if false %}{{ [].append(1) }}{% endif %}ok"), "ok");
}

TEST(Jinja, Globals) {
  EXPECT_EQ(render("{{ range(3)|list }}{{ range(1, 7, 2)|list }}"), "[0, 1, 2][1, 3, 5]");
  EXPECT_EQ(render("{{ dict(a=1).a }}{{ namespace(b=2).b }}"), "12");
  const std::string raised = error_of("{{ raise_exception('no system role') }}");
  EXPECT_NE(raised.find("no system role"), std::string::npos);
  EXPECT_NE(raised.find("line 1"), std::string::npos);
  EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");
}

TEST(Jinja, Undefined) {
  EXPECT_EQ(render("[{{ u }}]{{ u|length }}{{ u ~ 'x' }}{% for x in u %}no{% endfor %}"), "[]0x");
  EXPECT_EQ(render("{{ none.attr }}|{{ 'str'.attr }}"), "|");  // attributes of values: Undefined
  const std::string e = error_of("a\n{{ u.x }}");
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("'u' is undefined"), std::string::npos) << e;
  EXPECT_NE(error_of("{{ u + 1 }}").find("unsupported"), std::string::npos);
}

TEST(Jinja, LoadErrorsNameTheConstruct) {
  auto parse_error = [](const std::string& src) {
    auto t = Template::parse(src);
    EXPECT_FALSE(t.ok()) << src;
    return t.ok() ? std::string() : t.error().message;
  };
  EXPECT_NE(parse_error("a\n{{ x|frobnicate }}").find("filter 'frobnicate'"), std::string::npos);
  EXPECT_NE(parse_error("a\n{{ x|frobnicate }}").find("line 2"), std::string::npos);
  EXPECT_NE(parse_error("{{ x is frob }}").find("test 'frob'"), std::string::npos);
  EXPECT_NE(parse_error("{{ '{}'.format(x) }}").find("method 'format()'"), std::string::npos);
  EXPECT_NE(parse_error("{{ lipsum() }}").find("function 'lipsum()'"), std::string::npos);
  EXPECT_NE(parse_error("{% include 'x' %}").find("'{% include %}' is not supported"),
            std::string::npos);
  EXPECT_NE(parse_error("{% if x %}").find("not closed"), std::string::npos);
  EXPECT_NE(parse_error("{{ (1 }}").find("unbalanced '}'"), std::string::npos);
  EXPECT_NE(parse_error("{{ (1, }}").find("unbalanced"), std::string::npos);
  EXPECT_NE(parse_error("{{ f(1 2) }}").find("expected ')'"), std::string::npos);
  EXPECT_NE(parse_error("{% endfor %}").find("unexpected"), std::string::npos);
  EXPECT_NE(parse_error("{{ 'abc }}").find("unterminated"), std::string::npos);
}

TEST(Jinja, Limits) {
  // Nesting, steps, output bytes: errors, never a crash or a stall.
  EXPECT_NE(Template::parse("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .error()
                .message.find("nests deeper"),
            std::string::npos);
  RenderOptions small;
  small.max_steps = 10000;
  EXPECT_NE(error_of("{% for i in range(100000) %}{{ i }}{% endfor %}", "{}", small).find("steps"),
            std::string::npos);
  small = {};
  small.max_bytes = 1000;
  EXPECT_NE(error_of("{% for i in range(500) %}xxxx{% endfor %}", "{}", small).find("larger"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000 }}", "{}", small).find("larger"), std::string::npos);
  EXPECT_NE(error_of("{{ range(10000000)|length }}", "{}", small).find("range"), std::string::npos);
  // A value built to nest deeply is refused by the printers instead of overflowing the stack.
  EXPECT_NE(error_of("{% set ns = namespace(v=1) %}{% for i in range(2000) %}"
                     "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v|tojson }}")
                .find("deeper"),
            std::string::npos);
  // JSON from the client is refused past kMaxJsonDepth before it is parsed.
  EXPECT_FALSE(from_json(std::string(100000, '[') + std::string(100000, ']'), true).ok());
}

TEST(Jinja, TaintFollowsClientText) {
  auto t = Template::parse(
      "<s>{% for m in messages %}{{ '[' + m.role + ']' + m.content|trim }}"
      "{{ m.args|tojson }}{{ m.content[1:3]|upper }}{% endfor %}</s>");
  ASSERT_TRUE(t.ok()) << t.error().message;
  DictData msg;
  msg.set(std::get<StrPtr>(make_str("role").v), make_str("user"));
  msg.set(std::get<StrPtr>(make_str("content").v), make_str(" <|im_start|>x ", true));
  auto args = from_json(R"({"k": "v\"<|x|>"})", true);
  ASSERT_TRUE(args.ok());
  msg.set(std::get<StrPtr>(make_str("args").v), *args);
  DictData ctx;
  ctx.set(std::get<StrPtr>(make_str("messages").v), make_list({make_dict(msg)}));
  auto out = t->render(ctx);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(out->text, R"(<s>[user]<|im_start|>x{"k": "v\"<|x|>"}<|</s>)");
  // Exactly the client's bytes: the trimmed content, the key and value strings of the
  // arguments with their quotes, and the upper-cased slice.
  std::string marked(out->text.size(), '.');
  for (const TextSpan& s : out->taint)
    for (size_t i = s.begin; i < s.end; ++i) marked[i] = '#';
  EXPECT_EQ(marked, "........." + std::string(13, '#') + "." + std::string(3, '#') + ".." +
                        std::string(10, '#') + "." + std::string(2, '#') + "....");
}

}  // namespace
}  // namespace infercept::jinja
