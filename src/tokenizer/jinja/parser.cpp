#include "tokenizer/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <set>

namespace infercept::jinja {
namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Body parse_template() {
    std::string end;
    Body b = parse_body({}, end);
    return b;
  }

 private:
  // ---- token stream ----
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::name && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void error(const std::string& msg) const { throw TemplateError{msg, cur().line}; }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case TokenType::eof:
        return "end of template";
      case TokenType::block_end:
        return "'%}'";
      case TokenType::var_end:
        return "'}}'";
      case TokenType::string:
        return "a string";
      default:
        return "'" + t.value + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != TokenType::name) error("expected a name, got " + describe(cur()));
    std::string n = cur().value;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::block_end) error("expected '%}', got " + describe(cur()));
    next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth)
        p_.error("the template nests deeper than " + std::to_string(kMaxParseDepth) + " levels");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  ExprPtr node(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Statements up to one of the block tags in `ends` (consumed up to the tag's name, which
  // is returned in `end`); at the top level, up to the end of the template.
  Body parse_body(const std::set<std::string>& ends, std::string& end) {
    DepthGuard g(*this);
    Body body;
    while (true) {
      const Token& tk = cur();
      if (tk.type == TokenType::eof) {
        if (!ends.empty())
          error("unexpected end of template: a block is not closed (expected " + *ends.begin() +
                ")");
        return body;
      }
      if (tk.type == TokenType::text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::text;
        s->line = tk.line;
        s->text = tk.value;
        body.push_back(std::move(s));
        next();
      } else if (tk.type == TokenType::var_begin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::output;
        s->line = tk.line;
        s->expr = parse_tuple(true);
        if (cur().type != TokenType::var_end) error("expected '}}', got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (tk.type == TokenType::block_begin) {
        next();
        if (cur().type != TokenType::name) error("expected a tag name after '{%'");
        const std::string tag = cur().value;
        if (ends.count(tag)) {
          end = tag;
          next();
          return body;
        }
        body.push_back(parse_statement());
      } else {
        error("unexpected " + describe(tk));
      }
    }
  }

  StmtPtr parse_statement() {
    const int line = cur().line;
    const std::string tag = cur().value;
    next();
    auto s = std::make_unique<Stmt>();
    s->line = line;
    std::string end;
    if (tag == "if") {
      s->kind = Stmt::Kind::if_;
      ExprPtr c = parse_expression();
      expect_block_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, end);
        s->branches.emplace_back(std::move(c), std::move(b));
        if (end == "elif") {
          c = parse_expression();
          expect_block_end();
          continue;
        }
        if (end == "else") {
          expect_block_end();
          s->else_body = parse_body({"endif"}, end);
        }
        expect_block_end();
        break;
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::for_;
      const bool paren = skip_op("(");
      do {
        s->targets.push_back(expect_name());
      } while (skip_op(","));
      if (paren) expect_op(")");
      if (!skip_name("in")) error("expected 'in' in a for loop, got " + describe(cur()));
      s->expr = parse_tuple(false);
      if (skip_name("if")) s->cond = parse_expression();
      if (is_name("recursive")) error("recursive for loops are not supported");
      expect_block_end();
      s->body = parse_body({"else", "endfor"}, end);
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, end);
      }
      expect_block_end();
    } else if (tag == "set") {
      s->targets.push_back(expect_name());
      if (skip_op(".")) {
        s->attr = expect_name();
      } else {
        while (skip_op(",")) s->targets.push_back(expect_name());
      }
      if (skip_op("=")) {
        s->kind = Stmt::Kind::set;
        s->expr = parse_tuple(true);
        expect_block_end();
      } else {
        if (s->targets.size() != 1 || !s->attr.empty()) error("a {% set %} block assigns one name");
        if (is_op("|")) error("filters on {% set %} blocks are not supported");
        s->kind = Stmt::Kind::set_block;
        expect_block_end();
        s->body = parse_body({"endset"}, end);
        expect_block_end();
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::macro;
      s->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        std::string p = expect_name();
        ExprPtr def;
        if (skip_op("=")) def = parse_expression();
        s->params.emplace_back(std::move(p), std::move(def));
        if (!skip_op(",")) break;
      }
      expect_op(")");
      expect_block_end();
      s->body = parse_body({"endmacro"}, end);
      if (cur().type == TokenType::name) next();  // {% endmacro name %}
      expect_block_end();
    } else if (tag == "call") {
      s->kind = Stmt::Kind::call_block;
      if (is_op("(")) error("{% call %} with caller arguments is not supported");
      s->expr = parse_expression();
      if (s->expr->kind != Expr::Kind::call) error("{% call %} needs a macro call");
      expect_block_end();
      s->body = parse_body({"endcall"}, end);
      expect_block_end();
    } else if (tag == "filter") {
      s->kind = Stmt::Kind::filter_block;
      // The filters apply to the body's text, which stands in as `caller()`.
      ExprPtr subject = node(Expr::Kind::name, line);
      subject->name = " body";
      s->expr = parse_filter_chain(std::move(subject), /*first_bar=*/false);
      expect_block_end();
      s->body = parse_body({"endfilter"}, end);
      expect_block_end();
    } else if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_;
      expect_block_end();
    } else if (tag == "generation") {
      s->kind = Stmt::Kind::generation;
      expect_block_end();
      s->body = parse_body({"endgeneration"}, end);
      expect_block_end();
    } else if (tag == "elif" || tag == "else" || tag.rfind("end", 0) == 0) {
      error("unexpected '{% " + tag + " %}'");
    } else {
      error("the tag '{% " + tag + " %}' is not supported");
    }
    return s;
  }

  // ---- expressions ----

  // `a, b` as a tuple (where jinja2 allows one); with_cond: ternaries allowed.
  ExprPtr parse_tuple(bool with_cond) {
    const int line = cur().line;
    ExprPtr first = with_cond ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    ExprPtr t = node(Expr::Kind::tuple, line);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == TokenType::var_end || cur().type == TokenType::block_end || is_name("if"))
        break;
      t->args.push_back(with_cond ? parse_expression() : parse_or());
    }
    return t;
  }

  ExprPtr parse_expression() {
    DepthGuard g(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      next();
      ExprPtr c = node(Expr::Kind::cond, line);
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (skip_name("else")) otherwise = parse_expression();
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    ExprPtr n = node(Expr::Kind::binary, line);
    n->name = op;
    n->args.push_back(std::move(a));
    n->args.push_back(std::move(b));
    return n;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      ExprPtr n = node(Expr::Kind::unary, cur().line);
      next();
      n->name = "not";
      n->args.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    // A chain a < b < c is (a < b) and (b < c) in Python; chat templates compare pairs.
    while (true) {
      const int line = cur().line;
      std::string op;
      if (cur().type == TokenType::op &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
           cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == TokenType::name && peek().value == "in") {
        op = "not in";
        next();
        next();
      } else {
        return e;
      }
      e = binary(op, std::move(e), parse_math1(), line);
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().value;
      const int line = cur().line;
      next();
      e = binary(op, std::move(e), parse_concat(), line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      next();
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().value;
      const int line = cur().line;
      next();
      e = binary(op, std::move(e), parse_pow(), line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Kind::unary, cur().line);
      e->name = cur().value;
      next();
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_chain(std::move(e), true);
    return e;
  }

  ExprPtr literal(Value v, int line) {
    ExprPtr e = node(Expr::Kind::literal, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tk = cur();
    const int line = tk.line;
    if (tk.type == TokenType::name) {
      const std::string n = tk.value;
      next();
      if (n == "true" || n == "True") return literal(Value(true), line);
      if (n == "false" || n == "False") return literal(Value(false), line);
      if (n == "none" || n == "None") return literal(Value(None{}), line);
      ExprPtr e = node(Expr::Kind::name, line);
      e->name = n;
      return e;
    }
    if (tk.type == TokenType::string) {
      std::string s;
      while (cur().type == TokenType::string) {  // adjacent literals are one
        s += cur().value;
        next();
      }
      return literal(make_str(std::move(s)), line);
    }
    if (tk.type == TokenType::integer) {
      int64_t v = 0;
      const std::string& d = tk.value;
      auto r = std::from_chars(d.data(), d.data() + d.size(), v);
      if (r.ec != std::errc()) error("integer literal out of range: " + d);
      next();
      return literal(Value(v), line);
    }
    if (tk.type == TokenType::floating) {
      const double v = std::strtod(tk.value.c_str(), nullptr);
      next();
      return literal(Value(v), line);
    }
    if (skip_op("(")) {
      if (skip_op(")")) {
        ExprPtr t = node(Expr::Kind::tuple, line);
        return t;
      }
      ExprPtr first = parse_expression();
      if (skip_op(")")) return first;
      ExprPtr t = node(Expr::Kind::tuple, line);
      t->args.push_back(std::move(first));
      while (skip_op(",")) {
        if (is_op(")")) break;
        t->args.push_back(parse_expression());
      }
      expect_op(")");
      return t;
    }
    if (skip_op("[")) {
      ExprPtr l = node(Expr::Kind::list, line);
      while (!is_op("]")) {
        l->args.push_back(parse_expression());
        if (!skip_op(",")) break;
      }
      expect_op("]");
      return l;
    }
    if (skip_op("{")) {
      ExprPtr d = node(Expr::Kind::dict, line);
      while (!is_op("}")) {
        d->args.push_back(parse_expression());
        expect_op(":");
        d->args.push_back(parse_expression());
        if (!skip_op(",")) break;
      }
      expect_op("}");
      return d;
    }
    error("unexpected " + describe(tk));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const int line = cur().line;
      if (is_op(".")) {
        next();
        ExprPtr a;
        if (cur().type == TokenType::integer) {  // x.0 is x[0]
          a = node(Expr::Kind::item, line);
          a->args.push_back(std::move(e));
          a->args.push_back(parse_primary());
        } else {
          a = node(Expr::Kind::attr, line);
          a->name = expect_name();
          a->args.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        next();
        e = parse_subscript(std::move(e), line);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, int line) {
    ExprPtr parts[3];
    bool is_slice = false;
    for (int i = 0; i < 3; ++i) {
      if (!is_op(":") && !is_op("]")) parts[i] = parse_expression();
      if (i < 2 && skip_op(":")) {
        is_slice = true;
        continue;
      }
      break;
    }
    expect_op("]");
    ExprPtr s = node(is_slice ? Expr::Kind::slice : Expr::Kind::item, line);
    s->args.push_back(std::move(obj));
    if (!is_slice) {
      if (!parts[0]) error("empty subscript");
      s->args.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) s->args.push_back(std::move(p));
    }
    return s;
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) error("*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::name && peek().type == TokenType::op && peek().value == "=") {
        std::string k = cur().value;
        next();
        next();
        call.kwargs.emplace_back(std::move(k), parse_expression());
      } else {
        if (!call.kwargs.empty()) error("a positional argument follows a keyword argument");
        call.args.push_back(parse_expression());
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee, int line) {
    ExprPtr c = node(Expr::Kind::call, line);
    c->args.push_back(std::move(callee));
    parse_call_args(*c);
    return c;
  }

  // `| name(args)` filters and `is [not] name args` tests after a value; first_bar: the
  // chain starts with '|' (a {% filter %} tag starts with the name).
  ExprPtr parse_filter_chain(ExprPtr e, bool first_bar) {
    bool need_bar = first_bar;
    while (true) {
      const int line = cur().line;
      if (!need_bar || skip_op("|")) {
        need_bar = true;
        ExprPtr f = node(Expr::Kind::filter, line);
        f->name = expect_name();
        while (skip_op(".")) f->name += "." + expect_name();
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        ExprPtr t = node(Expr::Kind::test, line);
        t->negated = skip_name("not");
        t->name = expect_name();
        while (skip_op(".")) t->name += "." + expect_name();
        t->args.push_back(std::move(e));
        const TokenType ty = cur().type;
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((ty == TokenType::name || ty == TokenType::string || ty == TokenType::integer ||
                    ty == TokenType::floating || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) error("tests cannot be chained with 'is'");
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Body> parse(const std::vector<Token>& tokens) {
  try {
    return Parser(tokens).parse_template();
  } catch (const TemplateError& e) {
    return make_error("template line ", std::to_string(e.line), ": ", e.message);
  }
}

}  // namespace infercept::jinja
