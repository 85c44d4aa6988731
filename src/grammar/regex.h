// A JSON Schema `pattern` as a ByteDfa over the UTF-8 bytes of a string's decoded value.
//
// The syntax is ECMAScript's (JSON Schema's regex dialect), the subset schemas use: literals,
// `.`, escapes (\d \D \w \W \s \S, \t \n \r \f \v \0, \xHH, \uHHHH, \u{...}, escaped syntax
// characters), classes ([a-z0-9_-], negated [^...], with class escapes inside), groups
// ((...), (?:...), (?<name>...)), alternation, quantifiers (? * + {n} {n,} {n,m}, lazy or
// not: the same set of matches), anchors ^ and $ (no multiline flag: the string's start and
// end). Backreferences, lookaround, word boundaries (\b \B), Unicode property escapes and
// inline flags are errors naming the construct.
//
// A pattern is not anchored in JSON Schema: the value is valid when the regex matches
// anywhere in it (search), unless ^/$ pin it. So the automaton is that of
// `[\s\S]*(?:pattern)[\s\S]*` with ^ and $ as assertions at the value's start and end,
// built through a Thompson NFA and the subset construction, then intersected with the
// string's length bounds (in characters), trimmed and minimized (byte_dfa.h). Its alphabet is
// what a JSON string can hold: control characters only through the escapes \b \f \n \r \t, so
// a pattern that needs another one is treated as if that character could not occur.
#pragma once

#include <string_view>

#include "core/result.h"
#include "grammar/grammar.h"

namespace infercept::grammar {

// Bounds on the automaton: a pattern past them is an error ("too large").
constexpr int32_t kMaxPatternNfaStates = 100000;
constexpr int32_t kMaxPatternDfaStates = 4096;
constexpr int32_t kMaxRepeat = 1000;

// min_chars/max_chars: the string's minLength/maxLength (-1: none). Errors name the construct.
Result<ByteDfa> compile_pattern(std::string_view pattern, int32_t min_chars = 0,
                                int32_t max_chars = -1);

}  // namespace infercept::grammar
