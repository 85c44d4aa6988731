// The parsed template: expressions and statements, as jinja2's parser builds them for the
// subset chat templates use. Every node keeps its source line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace infercept::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,  // value
    name,     // name
    list,     // args: items
    tuple,    // args: items
    dict,     // args: key, value, key, value, ...
    attr,     // args[0].name
    item,     // args[0][args[1]]
    slice,    // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    unary,    // name: "not" | "-" | "+"; args[0]
    binary,   // name: the operator; args[0], args[1]
    cond,     // args[0] if args[1] else args[2] (args[2] may be null)
    filter,   // args[0] | name(args[1..], kwargs)
    test,     // args[0] is [not] name(args[1..], kwargs); negated
    call,     // args[0](args[1..], kwargs)
  };
  Kind kind;
  int line = 0;
  std::string name;
  Value value;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    text,          // text
    output,        // {{ expr }}
    if_,           // branches (cond, body); else_body
    for_,          // for targets in expr [if cond]: body; else_body
    set,           // set targets = expr, or set targets[0].attr = expr
    set_block,     // set targets[0] %}body{% endset
    macro,         // macro name(params): body
    call_block,    // call expr: body (the body is `caller()`)
    filter_block,  // filter expr (a filter chain on `caller`): body
    break_,
    continue_,
    generation,  // {% generation %}: the body, rendered as it is
  };
  Kind kind;
  int line = 0;
  std::string text;
  std::string name;  // macro name
  std::vector<std::string> targets;
  std::string attr;  // set ns.attr = ...
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro: name, default (may be null)
};

}  // namespace infercept::jinja
