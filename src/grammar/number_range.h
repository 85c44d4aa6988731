// The texts of JSON numbers within bounds (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum) and a multiple of a step (multipleOf), as a ByteDfa the matcher reads
// byte by byte.
//
// Exact: the bounds are decimals compared digit by digit, never doubles. The automaton's
// state after a prefix is, per bound, how the digits so far compare with the bound's (the
// length of the integer part so far against the bound's, then the first difference, then the
// fraction's), and per step the remainder so far; trimmed (byte_dfa.h), a state is kept only
// when some in-range number begins with its prefix, and accepting only when the prefix is
// itself in range. So after "1" for an integer in [1, 10], "0" or the end may come; after
// "2", only the end.
//
// What it leaves out, all valid but unneeded: exponent notation (1e3: a bounded number is
// written in positional notation, which keeps the comparison digit by digit), "-0" where the
// range has no negative number (so '-' is refused outright when minimum >= 0), and with
// multipleOf, fraction digits past the step's own (trailing zeros).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"
#include "grammar/grammar.h"

namespace infercept::grammar {

// An exact decimal number.
struct Decimal {
  bool neg = false;
  std::string int_digits;   // without leading zeros ("" for an integer part of 0)
  std::string frac_digits;  // without trailing zeros
  bool zero() const { return int_digits.empty() && frac_digits.empty(); }
};

// Parses a JSON number's text (exponents included: "1e+20", "2.5E-3"). Errors: not a
// number, or more than 400 digits either side of the point.
Result<Decimal> parse_decimal(std::string_view text);
// -1, 0, 1 as a <, ==, > b.
int compare(const Decimal& a, const Decimal& b);

struct NumberBounds {
  std::optional<Decimal> lo, hi;  // minimum / maximum
  bool lo_exclusive = false, hi_exclusive = false;
  std::optional<Decimal> step;  // multipleOf (> 0)
};

// The automaton of the numbers (integers when `integer`) that satisfy `b`. Errors: no number
// does, the step has more than 6 significant digits, or more than `max_states` states.
Result<ByteDfa> number_range_dfa(const NumberBounds& b, bool integer, int32_t max_states = 20000);

}  // namespace infercept::grammar
