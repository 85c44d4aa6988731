// Python's str operations on tainted strings, by code point as Python counts them: the
// bytes each result copies from its input keep their taint. Case mapping covers ASCII,
// Latin-1, Greek and Cyrillic (other letters are left as they are).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace infercept::jinja {

// Python's str.isspace for one code point.
bool py_isspace(uint32_t c);

// str.strip/lstrip/rstrip; chars: the code points to strip (nullopt: white space).
Str py_strip(const Str& s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) (sep nullopt: runs of white space, empty parts dropped) and
// str.rsplit.
std::vector<Str> py_split(const Str& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<Str> py_rsplit(const Str& s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.replace(old, new, count) (count < 0: all).
Str py_replace(const Str& s, const Str& old, const Str& repl, int64_t count);

enum class CaseMap { upper, lower, capitalize, title_method, title_filter };
// str.upper/lower/capitalize/title, and jinja2's `title` filter (words start after white
// space, '-', and opening brackets).
Str py_case(const Str& s, CaseMap how);

// s[start:stop:step] by code points (Python's slice rules).
Str py_slice(const Str& s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);
// Indices a slice selects from a sequence of length n.
std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, int64_t step);

// Byte offsets of each code point's start, plus the length at the end.
std::vector<size_t> cpt_offsets(std::string_view s);

}  // namespace infercept::jinja
