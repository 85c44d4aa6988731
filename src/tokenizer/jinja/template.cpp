#include "tokenizer/jinja/template.h"

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/evaluator.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace infercept::jinja {
namespace {

// Walks the tree once at load time: the names it reads, the macros it defines, and every
// filter, test, method and function it uses that the interpreter does not have.
class Checker {
 public:
  void body(const Body& b) {
    for (const StmtPtr& s : b) stmt(*s);
  }
  std::set<std::string> names, macros;
  struct Call {
    std::string name;
    int line;
  };
  std::vector<Call> called_names, called_attrs;
  std::string error;

 private:
  void bad(int line, const std::string& what) {
    if (error.empty()) error = "template line " + std::to_string(line) + ": " + what;
  }
  void stmt(const Stmt& s) {
    if (s.kind == Stmt::Kind::macro) macros.insert(s.name);
    if (s.expr) expr(*s.expr);
    if (s.cond) expr(*s.cond);
    for (const auto& [c, b] : s.branches) {
      expr(*c);
      body(b);
    }
    for (const auto& p : s.params)
      if (p.second) expr(*p.second);
    body(s.body);
    body(s.else_body);
  }
  void expr(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::name:
        names.insert(e.name);
        break;
      case Expr::Kind::filter:
        if (!is_known_filter(e.name))
          bad(e.line, "the filter '" + e.name + "' is not supported by infercept's interpreter");
        break;
      case Expr::Kind::test:
        if (!is_known_test(e.name))
          bad(e.line, "the test '" + e.name + "' is not supported by infercept's interpreter");
        break;
      case Expr::Kind::call: {
        const Expr& callee = *e.args[0];
        if (callee.kind == Expr::Kind::attr) called_attrs.push_back({callee.name, e.line});
        if (callee.kind == Expr::Kind::name) called_names.push_back({callee.name, e.line});
        break;
      }
      default:
        break;
    }
    for (const ExprPtr& a : e.args)
      if (a) expr(*a);
    for (const auto& kw : e.kwargs) expr(*kw.second);
  }
};

}  // namespace

Result<Template> Template::parse(const std::string& source) {
  TRY_ASSIGN(std::vector<Token> tokens, tokenize(source));
  TRY_ASSIGN(Body body, jinja::parse(tokens));
  Checker c;
  c.body(body);
  // A function called by name is a global, a macro of the template, or `caller`; a name the
  // caller passes in is never a function (the render context holds data only).
  for (const auto& call : c.called_names) {
    if (!is_known_global(call.name) && !c.macros.count(call.name) && call.name != "caller" &&
        c.error.empty()) {
      c.error = "template line " + std::to_string(call.line) + ": the function '" + call.name +
                "()' is not supported by infercept's interpreter";
    }
  }
  // A method is one the interpreter has, or a macro kept in a namespace (ns.m()).
  for (const auto& call : c.called_attrs) {
    if (!is_known_method(call.name) && !c.macros.count(call.name) && c.error.empty()) {
      c.error = "template line " + std::to_string(call.line) + ": the method '" + call.name +
                "()' is not supported by infercept's interpreter";
    }
  }
  if (!c.error.empty()) return Error{c.error};
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  t.names_ = std::move(c.names);
  return t;
}

Result<Str> Template::render(const DictData& context, const RenderOptions& options) const {
  try {
    return evaluate(*body_, context, options);
  } catch (const TemplateError& e) {
    return make_error("chat template line ", std::to_string(e.line), ": ", e.message);
  }
}

}  // namespace infercept::jinja
