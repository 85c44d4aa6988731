// What a chat turn's generation is constrained to (docs/SERVER.md, "Constrained decoding"):
//   tool_choice "required"  one or more calls, in the template's format, each naming a
//                           declared tool, its arguments valid for that tool's schema
//   a named tool            the same with that tool only
//   "auto"                  free text until the model opens a call (Hermes <tool_call>, a
//                           JSON turn's '{' at its start); the call is then constrained
//   response_format         json_object: the content is one JSON object; json_schema: one
//                           JSON value of the schema (tool_choice required/named wins)
// Grammars are compiled once per distinct request shape (tools, choice, format) and shared,
// with their mask cache, by the requests that have that shape.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/engine.h"
#include "grammar/tool_grammar.h"
#include "server/openai_protocol.h"

namespace infercept::server {

// How the template's model writes its calls (the text around a call and the arguments' key):
// the format the turn is read in (turn_format: the model's own template text, else the
// family), and for Mistral the layout its template writes calls back in, so that a
// follow-up renders the forced call as it was generated: [TOOL_CALLS]name[ARGS]{...} where
// the template text has [ARGS], else the v0.3 list [TOOL_CALLS][{"name", "arguments"}].
// A Llama 2 family's JSON turn carries "arguments" (Llama 3.1's: "parameters").
grammar::ToolCallSyntax tool_call_syntax(ToolCallFormat format, ChatTemplateKind kind,
                                         const std::string& template_text);
// The same for a template as the engine reads its turns (turn_format).
grammar::ToolCallSyntax tool_call_syntax(const ChatTemplate& tmpl, TurnFormat format);

class ConstraintCompiler {
 public:
  // The turn's constraint (null: free); an error names the parameter whose schema failed
  // (tools[i].function.parameters, response_format.json_schema.schema).
  std::optional<ApiError> build(const ChatRequest& cr, const grammar::ToolCallSyntax& syntax,
                                bool tools_active,
                                std::shared_ptr<const GenerationConstraint>& out);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const GenerationConstraint>> cache_;
};

}  // namespace infercept::server
