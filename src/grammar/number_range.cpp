#include "grammar/number_range.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "grammar/byte_dfa.h"

namespace infercept::grammar {

Result<Decimal> parse_decimal(std::string_view t) {
  Decimal d;
  size_t i = 0;
  auto bad = [&] { return make_error("'", std::string(t), "' is not a number"); };
  if (i < t.size() && (t[i] == '-' || t[i] == '+')) d.neg = t[i++] == '-';
  std::string digits;
  int64_t point = -1;  // digits before the point
  for (; i < t.size() && (std::isdigit((unsigned char)t[i]) || t[i] == '.'); ++i) {
    if (t[i] == '.') {
      if (point >= 0) return bad();
      point = (int64_t)digits.size();
    } else {
      digits += t[i];
    }
  }
  if (digits.empty()) return bad();
  if (point < 0) point = (int64_t)digits.size();
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    bool neg = false;
    if (i < t.size() && (t[i] == '-' || t[i] == '+')) neg = t[i++] == '-';
    int64_t e = 0;
    if (i >= t.size()) return bad();
    for (; i < t.size() && std::isdigit((unsigned char)t[i]); ++i) {
      e = e * 10 + (t[i] - '0');
      if (e > 100000) return make_error("'", std::string(t), "' is too large or too small");
    }
    point += neg ? -e : e;
  }
  if (i != t.size()) return bad();
  // Shift the point into the digits.
  if (point > (int64_t)digits.size() + 400 || point < -400)
    return make_error("'", std::string(t), "' has more than 400 digits");
  if (point < 0) {
    digits.insert(0, (size_t)-point, '0');
    point = 0;
  }
  if (point > (int64_t)digits.size()) digits.append((size_t)point - digits.size(), '0');
  d.int_digits = digits.substr(0, (size_t)point);
  d.frac_digits = digits.substr((size_t)point);
  d.int_digits.erase(0, std::min(d.int_digits.find_first_not_of('0'), d.int_digits.size()));
  while (!d.frac_digits.empty() && d.frac_digits.back() == '0') d.frac_digits.pop_back();
  if (d.int_digits.size() > 400 || d.frac_digits.size() > 400)
    return make_error("'", std::string(t), "' has more than 400 digits");
  if (d.zero()) d.neg = false;
  return d;
}

namespace {

// Magnitudes: -1, 0, 1.
int compare_abs(const Decimal& a, const Decimal& b) {
  if (a.int_digits.size() != b.int_digits.size())
    return a.int_digits.size() < b.int_digits.size() ? -1 : 1;
  if (const int c = a.int_digits.compare(b.int_digits); c != 0) return c < 0 ? -1 : 1;
  const size_t n = std::max(a.frac_digits.size(), b.frac_digits.size());
  for (size_t k = 0; k < n; ++k) {
    const char x = k < a.frac_digits.size() ? a.frac_digits[k] : '0';
    const char y = k < b.frac_digits.size() ? b.frac_digits[k] : '0';
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

}  // namespace

int compare(const Decimal& a, const Decimal& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  const int c = compare_abs(a, b);
  return a.neg ? -c : c;
}

namespace {

// How the magnitude read so far compares with a bound's magnitude B (integer digits I,
// fraction F). phase 0: in the integer part, k significant digits read (capped at |I| + 1:
// more is decided greater), c the first difference with I's first k digits; phase 1: in the
// fraction, equal so far, k fraction digits read (capped at |F|); phase 2: decided, c.
struct Cmp {
  int8_t phase = 0, c = 0;
  int16_t k = 0;
  auto key() const { return std::make_tuple(phase, c, k); }
};

struct MagBound {
  std::string i, f;
  bool exclusive = false;
  bool present = false;
};

Cmp decided(int c) {
  return {2, (int8_t)c, 0};
}

Cmp int_digit(const MagBound& b, Cmp s, char d) {
  if (s.phase == 2) return s;
  const int16_t n = (int16_t)b.i.size();
  if (s.k >= n) return decided(1);  // more integer digits than the bound has
  if (s.c == 0) s.c = (int8_t)(d < b.i[(size_t)s.k] ? -1 : d > b.i[(size_t)s.k] ? 1 : 0);
  ++s.k;
  return s;
}

Cmp point(const MagBound& b, Cmp s) {
  if (s.phase == 2) return s;
  if (s.k < (int16_t)b.i.size()) return decided(-1);  // fewer integer digits
  if (s.c != 0) return decided(s.c);
  return {1, 0, 0};
}

Cmp frac_digit(const MagBound& b, Cmp s, char d) {
  if (s.phase != 1) return s;
  const char bd = s.k < (int16_t)b.f.size() ? b.f[(size_t)s.k] : '0';
  if (d != bd) return decided(d < bd ? -1 : 1);
  s.k = (int16_t)std::min<size_t>((size_t)s.k + 1, b.f.size());
  return s;
}

// The comparison if the number ends here.
int at_end(const MagBound& b, const Cmp& s) {
  switch (s.phase) {
    case 0:
      if (s.k < (int16_t)b.i.size()) return -1;
      return s.c != 0 ? s.c : (b.f.empty() ? 0 : -1);
    case 1:
      return s.k < (int16_t)b.f.size() ? -1 : 0;
    default:
      return s.c;
  }
}

// The state of the whole number: which sign (0 before it, 1 positive, 2 negative), where in
// the syntax (0 expecting the first digit, 1 after a leading 0, 2 integer digits, 3 after
// '.', 4 fraction digits), the two comparisons, and the remainder by the step with the
// fraction digits read.
struct State {
  int8_t branch = 0, syn = 0;
  Cmp lo, hi;
  int32_t rem = 0;
  int16_t frac = 0;
  auto key() const { return std::make_tuple(branch, syn, lo.key(), hi.key(), rem, frac); }
  bool operator<(const State& o) const { return key() < o.key(); }
};

constexpr int kMinus = 0, kPoint = 11;  // classes: '-' 0, digits 1..10, '.' 11

}  // namespace

Result<ByteDfa> number_range_dfa(const NumberBounds& nb, bool integer, int32_t max_states) {
  // Each sign is a range of magnitudes m: positive lo <= m <= hi, negative -hi <= m <= -lo.
  // "-0" (m = 0 after '-') is written only where 0 and negative numbers are both in range, so
  // a range with no negative number never lets '-' through. A sign no number of the range
  // has gets the impossible bound m < 0.
  MagBound lo[3], hi[3];
  const MagBound none_fits{"", "", true, true};  // m < 0 (as an upper bound), m > 0 (lower)
  auto mag = [](const Decimal& d, bool excl) {
    return MagBound{d.int_digits, d.frac_digits, excl, true};
  };
  const bool negatives = !nb.lo || nb.lo->neg;
  const bool zero_in = (!nb.lo || nb.lo->neg || (nb.lo->zero() && !nb.lo_exclusive)) &&
                       (!nb.hi || !nb.hi->neg) && !(nb.hi && nb.hi->zero() && nb.hi_exclusive);
  if (nb.lo && !nb.lo->neg) lo[1] = mag(*nb.lo, nb.lo_exclusive);
  if (nb.hi) hi[1] = nb.hi->neg ? none_fits : mag(*nb.hi, nb.hi_exclusive);
  if (nb.hi && nb.hi->neg)
    lo[2] = mag(*nb.hi, nb.hi_exclusive);
  else
    lo[2] = MagBound{"", "", !(negatives && zero_in), true};  // m >= 0, or m > 0
  if (nb.lo) hi[2] = nb.lo->neg ? mag(*nb.lo, nb.lo_exclusive) : none_fits;
  // The step P * 10^-S.
  int64_t P = 1;
  int32_t S = 0;
  if (nb.step) {
    const std::string digits = nb.step->int_digits + nb.step->frac_digits;
    const size_t first = digits.find_first_not_of('0');
    if (first == std::string::npos) return make_error("'multipleOf' must be greater than 0");
    if (digits.size() - first > 6)
      return make_error("'multipleOf' with more than 6 significant digits is not supported");
    P = std::stoll(digits.substr(first));
    S = (int32_t)nb.step->frac_digits.size();
  }
  auto pow10_mod = [&](int32_t e) {
    int64_t r = 1 % P;
    for (int32_t k = 0; k < e; ++k) r = r * 10 % P;
    return r;
  };
  auto accepting = [&](const State& s) {
    if (s.branch == 0 || (s.syn != 1 && s.syn != 2 && s.syn != 4)) return false;
    const MagBound& l = lo[s.branch];
    const MagBound& h = hi[s.branch];
    if (l.present) {
      const int c = at_end(l, s.lo);
      if (c < 0 || (c == 0 && l.exclusive)) return false;
    }
    if (h.present) {
      const int c = at_end(h, s.hi);
      if (c > 0 || (c == 0 && h.exclusive)) return false;
    }
    return !nb.step || s.rem * pow10_mod(S - s.frac) % P == 0;
  };
  // The next state on class `cls`, if the syntax (and the step's fraction digits) allow it.
  auto step = [&](const State& s, int cls) -> std::optional<State> {
    State t = s;
    if (cls == kMinus) {
      if (s.branch != 0) return std::nullopt;
      t.branch = 2;
      return t;
    }
    if (s.branch == 0) t.branch = 1;
    const MagBound& l = lo[t.branch];
    const MagBound& h = hi[t.branch];
    if (cls == kPoint) {
      if (integer || (nb.step && S == 0) || (t.syn != 1 && t.syn != 2)) return std::nullopt;
      t.syn = 3;
      t.lo = point(l, t.lo);
      t.hi = point(h, t.hi);
      return t;
    }
    const char d = (char)('0' + cls - 1);
    switch (t.syn) {
      case 0:
        t.syn = d == '0' ? 1 : 2;
        if (d == '0') return t;  // a leading 0: no significant digit
        break;
      case 1:
        return std::nullopt;  // no digit after a leading 0
      case 3:
      case 4:
        t.syn = 4;
        t.lo = frac_digit(l, t.lo, d);
        t.hi = frac_digit(h, t.hi, d);
        if (nb.step) {  // the remainder and the fraction digits count only with a step
          if (t.frac >= S) return std::nullopt;
          t.rem = (int32_t)((t.rem * 10 + (d - '0')) % P);
          ++t.frac;
        }
        return t;
      default:
        break;
    }
    t.lo = int_digit(l, t.lo, d);
    t.hi = int_digit(h, t.hi, d);
    if (nb.step) t.rem = (int32_t)((t.rem * 10 + (d - '0')) % P);
    return t;
  };
  ByteDfa d;
  std::memset(d.cls, ByteDfa::kNone, sizeof d.cls);
  d.cls[(uint8_t)'-'] = kMinus;
  for (int k = 0; k < 10; ++k) d.cls['0' + k] = (uint8_t)(1 + k);
  d.cls[(uint8_t)'.'] = kPoint;
  d.n_classes = 12;
  std::map<State, int32_t> ids;
  std::vector<State> order{State{}};
  ids[State{}] = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const State s = order[k];
    d.accept.push_back(accepting(s));
    for (int cls = 0; cls < d.n_classes; ++cls) {
      const std::optional<State> t = step(s, cls);
      if (!t) {
        d.next.push_back(-1);
        continue;
      }
      const auto [it, added] = ids.emplace(*t, (int32_t)order.size());
      if (added) {
        if ((int32_t)order.size() >= max_states)
          return make_error("the bounds need more than ", std::to_string(max_states),
                            " automaton states");
        order.push_back(*t);
      }
      d.next.push_back(it->second);
    }
  }
  if (!trim_dfa(d)) return make_error("no number satisfies the bounds");
  minimize_dfa(d);
  return d;
}

}  // namespace infercept::grammar
