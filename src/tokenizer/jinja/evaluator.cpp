#include "tokenizer/jinja/evaluator.h"

#include <cmath>
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/str_ops.h"

namespace infercept::jinja {
namespace {

// A scope: the variables set in it, then its parent's.
struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;

  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get()) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { normal, break_, continue_ };

class Renderer {
 public:
  Renderer(const DictData& ctx, const RenderOptions& o)
      : ctx_(ctx), o_(o), lim_{o.max_bytes, int64_t(o.max_bytes / 8 + 1024), &namespaces_} {}

  ~Renderer() {
    // A namespace may hold itself (`set ns.me = ns`): emptied, every one is freed.
    for (const auto& ns : namespaces_) ns->attrs = DictData{};
  }

  Str run(const Body& body) { return capture(body, std::make_shared<Frame>()); }

 private:
  void step(int line) {
    line_ = line;
    if (++steps_ > o_.max_steps)
      fail("the template ran more than " + std::to_string(o_.max_steps) + " steps");
  }

  void emit(const Str& s) {
    if (out_->text.size() + s.text.size() > o_.max_bytes)
      fail("the rendered text is larger than " + std::to_string(o_.max_bytes) + " bytes");
    out_->append(s);
  }

  // ---- statements ----

  Flow exec_body(const Body& body, const FramePtr& f) {
    for (const StmtPtr& s : body) {
      const Flow fl = exec(*s, f);
      if (fl != Flow::normal) return fl;
    }
    return Flow::normal;
  }

  Flow exec(const Stmt& s, const FramePtr& f) {
    step(s.line);
    switch (s.kind) {
      case Stmt::Kind::text: {
        Str t;
        t.text = s.text;
        emit(t);
        return Flow::normal;
      }
      case Stmt::Kind::output: {
        const Value v = eval(*s.expr, f);
        line_ = s.line;
        emit(to_str(v));
        return Flow::normal;
      }
      case Stmt::Kind::if_:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond, f))) return exec_body(body, f);
        return exec_body(s.else_body, f);
      case Stmt::Kind::for_:
        return exec_for(s, f);
      case Stmt::Kind::set: {
        Value v = eval(*s.expr, f);
        line_ = s.line;
        if (!s.attr.empty()) {
          const Value* target = f->find(s.targets[0]);
          if (!target) target = ctx_.find(s.targets[0]);
          if (!target || !target->is_namespace())
            fail("cannot assign attribute '" + s.attr + "' of '" + s.targets[0] +
                 "', which is not a namespace()");
          target->ns().attrs.set(std::get<StrPtr>(make_str(s.attr).v), std::move(v));
        } else {
          assign(s.targets, v, *f);
        }
        return Flow::normal;
      }
      case Stmt::Kind::set_block: {
        f->vars[s.targets[0]] = make_str(capture(s.body, f));
        return Flow::normal;
      }
      case Stmt::Kind::macro: {
        f->vars[s.name] = make_macro(s, f);
        return Flow::normal;
      }
      case Stmt::Kind::call_block: {
        // The body is `caller()` inside the macro the tag calls.
        const Stmt* body_stmt = &s;
        Value caller = make_callable("caller", [this, body_stmt, f](const CallArgs&) {
          return make_str(capture(body_stmt->body, std::make_shared<Frame>(Frame{{}, f})));
        });
        const Expr& call = *s.expr;
        Value fn = eval(*call.args[0], f);
        CallArgs args = eval_args(call, f, 1);
        args.keyword.emplace_back("caller", std::move(caller));
        emit(to_str(invoke(fn, args, call.line)));
        return Flow::normal;
      }
      case Stmt::Kind::filter_block: {
        auto inner = std::make_shared<Frame>(Frame{{}, f});
        inner->vars[" body"] = make_str(capture(s.body, f));
        emit(to_str(eval(*s.expr, inner)));
        return Flow::normal;
      }
      case Stmt::Kind::break_:
        return Flow::break_;
      case Stmt::Kind::continue_:
        return Flow::continue_;
      case Stmt::Kind::generation:
        return exec_body(s.body, f);
    }
    return Flow::normal;
  }

  void assign(const std::vector<std::string>& targets, const Value& v, Frame& f) {
    if (targets.size() == 1) {
      f.vars[targets[0]] = v;
      return;
    }
    std::vector<Value> items = iterate(v);
    if (items.size() != targets.size())
      fail("cannot unpack " + std::to_string(items.size()) + " values into " +
           std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) f.vars[targets[i]] = items[i];
  }

  Str capture(const Body& body, const FramePtr& f) {
    Str out;
    Str* saved = out_;
    out_ = &out;
    exec_body(body, f);
    out_ = saved;
    return out;
  }

  Flow exec_for(const Stmt& s, const FramePtr& f) {
    const Value seq = eval(*s.expr, f);
    line_ = s.line;
    std::vector<Value> items = iterate(seq);
    if (s.cond) {  // the loop's `if` filters before `loop` counts
      std::vector<Value> kept;
      for (Value& item : items) {
        step(s.line);
        auto scope = std::make_shared<Frame>(Frame{{}, f});
        assign(s.targets, item, *scope);
        if (truthy(eval(*s.cond, scope))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body, f);
    auto list = std::make_shared<ListData>();
    list->items = std::move(items);
    const Value* outer = f->find("loop");
    const int64_t depth0 = outer && outer->is_loop() ? outer->loop().depth0 + 1 : 0;
    for (size_t i = 0; i < list->items.size(); ++i) {
      step(s.line);
      auto scope = std::make_shared<Frame>(Frame{{}, f});
      assign(s.targets, list->items[i], *scope);
      auto loop = std::make_shared<LoopData>();
      loop->items = list;
      loop->index0 = i;
      loop->depth0 = depth0;
      scope->vars["loop"] = Value(std::move(loop));
      if (exec_body(s.body, scope) == Flow::break_) break;
    }
    return Flow::normal;
  }

  // The macro holds its scope weakly (the scope holds the macro: a strong reference would
  // keep both alive after the render); the renderer keeps the scope alive until the end, so
  // a macro called after its loop iteration still finds it, as in jinja2.
  Value make_macro(const Stmt& s, const FramePtr& defined_in) {
    const Stmt* m = &s;
    macro_scopes_.push_back(defined_in);
    std::weak_ptr<Frame> weak_scope = defined_in;
    return make_callable(s.name, [this, m, weak_scope](const CallArgs& a) {
      FramePtr defined = weak_scope.lock();
      if (!defined) fail("macro '" + m->name + "' called after the scope it was defined in");
      if (++call_depth_ > o_.max_call_depth)
        fail("macro calls nest deeper than " + std::to_string(o_.max_call_depth));
      auto scope = std::make_shared<Frame>(Frame{{}, defined});
      if (a.positional.size() > m->params.size())
        fail("macro '" + m->name + "' takes " + std::to_string(m->params.size()) + " arguments, " +
             std::to_string(a.positional.size()) + " given");
      for (size_t i = 0; i < m->params.size(); ++i) {
        const auto& [pname, dflt] = m->params[i];
        if (a.has(i, pname)) {
          scope->vars[pname] = a.get(i, pname);
        } else if (dflt) {
          scope->vars[pname] = eval(*dflt, scope);
        } else {
          scope->vars[pname] = Value(Undefined{"'" + pname + "' is undefined"});
        }
      }
      for (const auto& [k, v] : a.keyword) {
        bool known = k == "caller";
        for (const auto& p : m->params) known = known || p.first == k;
        if (!known) fail("macro '" + m->name + "' takes no keyword argument '" + k + "'");
        if (k == "caller") scope->vars["caller"] = v;
      }
      Str out = capture(m->body, scope);
      --call_depth_;
      return make_str(std::move(out));
    });
  }

  // ---- expressions ----

  Value lookup(const std::string& name, const FramePtr& f) {
    if (const Value* v = f->find(name)) return *v;
    if (const Value* v = ctx_.find(name)) return *v;
    Value g = get_global(name, lim_);
    return g;
  }

  CallArgs eval_args(const Expr& e, const FramePtr& f, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i], f));
    for (const auto& [k, x] : e.kwargs) a.keyword.emplace_back(k, eval(*x, f));
    return a;
  }

  Value invoke(const Value& fn, const CallArgs& args, int line) {
    line_ = line;
    if (!fn.is_callable()) {
      if (fn.is_undefined()) fail(std::get<Undefined>(fn.v).hint + " (called as a function)");
      fail(std::string("'") + type_name(fn) + "' object is not callable");
    }
    Value r = fn.callable().fn(args);
    line_ = line;
    return r;
  }

  std::optional<int64_t> opt_index(const ExprPtr& e, const FramePtr& f) {
    if (!e) return std::nullopt;
    Value v = eval(*e, f);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) fail("slice indices must be integers or None");
    return v.as_int();
  }

  Value eval(const Expr& e, const FramePtr& f) {
    step(e.line);
    switch (e.kind) {
      case Expr::Kind::literal:
        return e.value;
      case Expr::Kind::name: {
        Value v = lookup(e.name, f);
        return v;
      }
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        std::vector<Value> items;
        for (const ExprPtr& x : e.args) items.push_back(eval(*x, f));
        return make_list(std::move(items), e.kind == Expr::Kind::tuple);
      }
      case Expr::Kind::dict: {
        DictData d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i], f);
          if (!k.is_str()) fail("dict literals with keys other than strings are not supported");
          d.set(std::get<StrPtr>(k.v), eval(*e.args[i + 1], f));
        }
        return make_dict(std::move(d));
      }
      case Expr::Kind::attr: {
        Value obj = eval(*e.args[0], f);
        line_ = e.line;
        return get_attr(obj, e.name, lim_);
      }
      case Expr::Kind::item: {
        Value obj = eval(*e.args[0], f);
        Value key = eval(*e.args[1], f);
        line_ = e.line;
        return get_item(obj, key, lim_);
      }
      case Expr::Kind::slice: {
        Value obj = eval(*e.args[0], f);
        const auto start = opt_index(e.args[1], f), stop = opt_index(e.args[2], f);
        const auto step_v = opt_index(e.args[3], f);
        line_ = e.line;
        const int64_t st = step_v.value_or(1);
        if (obj.is_str()) return make_str(py_slice(obj.str(), start, stop, st));
        if (obj.is_list()) {
          std::vector<Value> out;
          for (int64_t k : slice_indices(int64_t(obj.list().items.size()), start, stop, st))
            out.push_back(obj.list().items[size_t(k)]);
          return make_list(std::move(out), obj.list().tuple);
        }
        if (obj.is_undefined()) fail(std::get<Undefined>(obj.v).hint + " (sliced)");
        fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
      }
      case Expr::Kind::unary: {
        Value x = eval(*e.args[0], f);
        line_ = e.line;
        if (e.name == "not") return Value(!truthy(x));
        if (x.is_float())
          return Value(e.name == "-" ? -std::get<double>(x.v) : std::get<double>(x.v));
        if (x.is_int() || x.is_bool()) return Value(e.name == "-" ? -x.as_int() : x.as_int());
        fail(std::string("bad operand type for unary ") + e.name + ": '" + type_name(x) + "'");
      }
      case Expr::Kind::binary:
        return eval_binary(e, f);
      case Expr::Kind::cond: {
        if (truthy(eval(*e.args[1], f))) return eval(*e.args[0], f);
        if (e.args[2]) return eval(*e.args[2], f);
        return Value(Undefined{"the conditional expression's else branch"});
      }
      case Expr::Kind::filter: {
        Value subject = eval(*e.args[0], f);
        CallArgs a = eval_args(e, f, 1);
        line_ = e.line;
        return apply_filter(e.name, subject, a, lim_);
      }
      case Expr::Kind::test: {
        Value subject = eval(*e.args[0], f);
        CallArgs a = eval_args(e, f, 1);
        line_ = e.line;
        return Value(apply_test(e.name, subject, a) != e.negated);
      }
      case Expr::Kind::call: {
        Value fn = eval(*e.args[0], f);
        CallArgs a = eval_args(e, f, 1);
        return invoke(fn, a, e.line);
      }
    }
    fail("unknown expression");
  }

  Value eval_binary(const Expr& e, const FramePtr& f) {
    const std::string& op = e.name;
    if (op == "and" || op == "or") {  // Python's: the deciding operand, not a bool
      Value a = eval(*e.args[0], f);
      if (truthy(a) == (op == "or")) return a;
      return eval(*e.args[1], f);
    }
    Value a = eval(*e.args[0], f);
    Value b = eval(*e.args[1], f);
    line_ = e.line;
    if (op == "==") return Value(equal(a, b));
    if (op == "!=") return Value(!equal(a, b));
    if (op == "<") return Value(less(a, b));
    if (op == ">") return Value(less(b, a));
    if (op == "<=") return Value(!less(b, a));
    if (op == ">=") return Value(!less(a, b));
    if (op == "in" || op == "not in") {
      CallArgs args;
      args.positional.push_back(b);
      if (!b.is_str() && !b.is_list() && !b.is_dict() && !b.is_undefined())
        fail(std::string("argument of type '") + type_name(b) + "' is not iterable");
      if (b.is_str() && !a.is_str())
        fail(std::string("'in <string>' requires string as left operand, not ") + type_name(a));
      return Value(apply_test("in", a, args) == (op == "in"));
    }
    if (op == "~") {
      Str s = to_str(a);
      s.append(to_str(b));
      s.markup = false;  // jinja2 joins with str.join: a plain string
      check_len(s.text.size());
      return make_str(std::move(s));
    }
    return arithmetic(op, a, b);
  }

  void check_len(size_t n) {
    if (n > o_.max_bytes)
      fail("a string or list grew larger than " + std::to_string(o_.max_bytes) + " bytes");
  }

  Value arithmetic(const std::string& op, const Value& a, const Value& b) {
    auto type_error = [&]() -> Value {
      fail("unsupported operand types for " + op + ": '" + type_name(a) + "' and '" + type_name(b) +
           "'");
    };
    if (op == "+") {
      if (a.is_str() && b.is_str()) {
        const bool markup = a.str().markup || b.str().markup;
        Str s = markup && !a.str().markup ? html_escape(a.str()) : a.str();
        s.append(markup && !b.str().markup ? html_escape(b.str()) : b.str());
        s.markup = markup;
        check_len(s.text.size());
        return make_str(std::move(s));
      }
      if (a.is_list() && b.is_list()) {
        std::vector<Value> items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        check_len(items.size());
        return make_list(std::move(items), a.list().tuple && b.list().tuple);
      }
    }
    if (op == "*" && ((a.is_str() || a.is_list()) != (b.is_str() || b.is_list()))) {
      const Value& seq = a.is_str() || a.is_list() ? a : b;
      const Value& n = a.is_str() || a.is_list() ? b : a;
      if (!n.is_int() && !n.is_bool()) return type_error();
      const int64_t times = std::max<int64_t>(0, n.as_int());
      const size_t unit = seq.is_str() ? seq.str().text.size() : seq.list().items.size();
      if (unit && times > int64_t(o_.max_bytes / unit)) check_len(o_.max_bytes + 1);
      if (seq.is_str()) {
        Str s;
        for (int64_t i = 0; i < times; ++i) s.append(seq.str());
        return make_str(std::move(s));
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < times; ++i)
        items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
      return make_list(std::move(items));
    }
    if (!a.is_number() || !b.is_number()) return type_error();
    const bool fl = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.as_double() == 0) fail("division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (fl) {
      const double x = a.as_double(), y = b.as_double();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (op == "**") return Value(std::pow(x, y));
      if (y == 0) fail("float division by zero");
      if (op == "//") return Value(std::floor(x / y));
      if (op == "%") {
        double r = std::fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return Value(r);
      }
      return type_error();
    }
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) fail("integer overflow");
      return Value(r);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) fail("integer overflow");
      return Value(r);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) fail("integer overflow");
      return Value(r);
    }
    if (op == "**") {
      if (y < 0) return Value(std::pow(double(x), double(y)));
      r = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(r, x, &r)) fail("integer overflow");
        if (r == 0 || r == 1) break;
      }
      return Value(r);
    }
    if (y == 0) fail("integer division or modulo by zero");
    if (op == "//") {
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return Value(q);
    }
    if (op == "%") {
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    return type_error();
  }

 public:
  int line_ = 0;

 private:
  const DictData& ctx_;
  const RenderOptions& o_;
  BuiltinLimits lim_;
  Str* out_ = nullptr;
  std::vector<std::shared_ptr<NamespaceData>> namespaces_;  // made by namespace() here
  std::vector<FramePtr> macro_scopes_;                      // scopes macros were defined in
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Str evaluate(const Body& body, const DictData& context, const RenderOptions& options) {
  Renderer r(context, options);
  try {
    return r.run(body);
  } catch (TemplateError& e) {
    if (e.line == 0) e.line = r.line_;
    throw;
  }
}

}  // namespace infercept::jinja
