#include "workload/trace.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

namespace infercept {

using json = nlohmann::json;

int64_t TraceRequest::generated_tokens() const {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.generate_tokens;
  return n;
}

int64_t TraceRequest::returned_tokens() const {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.return_tokens;
  return n;
}

int64_t TraceRequest::final_context_tokens() const {
  return prompt_tokens + generated_tokens() + returned_tokens();
}

double TraceRequest::total_tool_seconds() const {
  double t = 0.0;
  for (const Segment& s : segments) t += s.tool_seconds;
  return t;
}

namespace {

// Every error of one line starts with "source:line: " so a user can open the file there.
class LineContext {
 public:
  LineContext(std::string_view source, size_t line) : source_(source), line_(line) {}

  Error error(std::string_view field, std::string_view what) const {
    std::string msg = std::string(source_) + ":" + std::to_string(line_) + ": ";
    if (!field.empty()) msg += "field '" + std::string(field) + "': ";
    msg += what;
    return Error{std::move(msg)};
  }

 private:
  std::string_view source_;
  size_t line_;
};

std::string type_of(const json& v) {
  return v.type_name();
}

Result<uint64_t> get_u64(const json& v, const LineContext& ctx, const std::string& field) {
  // nlohmann stores non-negative integer literals as unsigned, negative ones as signed.
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return ctx.error(field, "must be >= 0, got " + v.dump());
  return ctx.error(field, "must be a non-negative integer, got " + type_of(v) + " " + v.dump());
}

Result<int32_t> get_i32(const json& v, const LineContext& ctx, const std::string& field,
                        int32_t min_value) {
  if (!v.is_number_integer()) {
    return ctx.error(field, "must be an integer, got " + type_of(v) + " " + v.dump());
  }
  // Range checks in 64 bits so that huge literals are reported instead of wrapping into range.
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return ctx.error(field, "must fit in 32 bits, got " + v.dump());
    }
  } else if (v.get<int64_t>() < std::numeric_limits<int32_t>::min()) {
    return ctx.error(field, "must fit in 32 bits, got " + v.dump());
  }
  const int32_t x = static_cast<int32_t>(v.get<int64_t>());
  if (x < min_value) {
    return ctx.error(field, "must be >= " + std::to_string(min_value) + ", got " + v.dump());
  }
  return x;
}

Result<double> get_seconds(const json& v, const LineContext& ctx, const std::string& field) {
  if (!v.is_number()) return ctx.error(field, "must be a number, got " + type_of(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0.0) {
    return ctx.error(field, "must be a finite number >= 0, got " + v.dump());
  }
  return x;
}

Result<std::string> get_string(const json& v, const LineContext& ctx, const std::string& field) {
  if (!v.is_string()) return ctx.error(field, "must be a string, got " + type_of(v));
  return v.get<std::string>();
}

// Unknown keys are rejected: a misspelt optional key would otherwise be silently ignored and
// the replay would differ from what the author of the file meant.
Status check_keys(const json& obj, std::initializer_list<std::string_view> allowed,
                  const LineContext& ctx, const std::string& prefix) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (std::string_view a : allowed) known = known || it.key() == a;
    if (!known) return ctx.error(prefix + it.key(), "unknown field");
  }
  return ok_status();
}

Result<Segment> parse_segment(const json& v, const LineContext& ctx, size_t index, bool last) {
  const std::string prefix = "segments[" + std::to_string(index) + "].";
  if (!v.is_object()) {
    return ctx.error(prefix.substr(0, prefix.size() - 1), "must be an object, got " + type_of(v));
  }
  TRY(check_keys(v, {"generate_tokens", "tool", "tool_seconds", "return_tokens"}, ctx, prefix));
  Segment s;
  if (!v.contains("generate_tokens")) return ctx.error(prefix + "generate_tokens", "missing");
  TRY_ASSIGN(s.generate_tokens,
             get_i32(v.at("generate_tokens"), ctx, prefix + "generate_tokens", 1));
  if (v.contains("tool")) {
    TRY_ASSIGN(s.tool, get_string(v.at("tool"), ctx, prefix + "tool"));
  }

  if (last) {
    // The request ends after the last segment: nothing may follow it.
    if (!s.tool.empty()) {
      return ctx.error(prefix + "tool",
                       "must be empty or absent on the last segment, got \"" + s.tool + "\"");
    }
    for (const char* f : {"tool_seconds", "return_tokens"}) {
      if (v.contains(f) && !(v.at(f).is_number() && v.at(f).get<double>() == 0.0)) {
        return ctx.error(prefix + f, "must be 0 or absent on the last segment");
      }
    }
    return s;
  }
  if (s.tool.empty()) {
    return ctx.error(prefix + "tool",
                     "missing or empty; only the last segment ends the request without a tool");
  }
  if (!v.contains("tool_seconds")) return ctx.error(prefix + "tool_seconds", "missing");
  TRY_ASSIGN(s.tool_seconds, get_seconds(v.at("tool_seconds"), ctx, prefix + "tool_seconds"));
  if (!v.contains("return_tokens")) return ctx.error(prefix + "return_tokens", "missing");
  TRY_ASSIGN(s.return_tokens, get_i32(v.at("return_tokens"), ctx, prefix + "return_tokens", 0));
  return s;
}

Result<TraceRequest> parse_request(const json& v, const LineContext& ctx) {
  if (!v.is_object()) return ctx.error("", "expected a JSON object, got " + type_of(v));
  TRY(check_keys(v, {"id", "arrival_s", "augmentation", "prompt_tokens", "segments", "seed"}, ctx,
                 ""));
  for (const char* f : {"id", "arrival_s", "augmentation", "prompt_tokens", "segments", "seed"}) {
    if (!v.contains(f)) return ctx.error(f, "missing");
  }
  TraceRequest r;
  TRY_ASSIGN(r.id, get_u64(v.at("id"), ctx, "id"));
  TRY_ASSIGN(r.arrival_s, get_seconds(v.at("arrival_s"), ctx, "arrival_s"));
  TRY_ASSIGN(r.augmentation, get_string(v.at("augmentation"), ctx, "augmentation"));
  if (r.augmentation.empty()) return ctx.error("augmentation", "must not be empty");
  TRY_ASSIGN(r.prompt_tokens, get_i32(v.at("prompt_tokens"), ctx, "prompt_tokens", 1));
  TRY_ASSIGN(r.seed, get_u64(v.at("seed"), ctx, "seed"));

  const json& segs = v.at("segments");
  if (!segs.is_array()) return ctx.error("segments", "must be an array, got " + type_of(segs));
  if (segs.empty()) return ctx.error("segments", "must hold at least one segment");
  r.segments.reserve(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    TRY_ASSIGN(Segment s, parse_segment(segs[i], ctx, i, i + 1 == segs.size()));
    r.segments.push_back(std::move(s));
  }
  // Token counts are int32 each, but their sum is the context length the engine allocates.
  if (r.final_context_tokens() > std::numeric_limits<int32_t>::max()) {
    return ctx.error("segments", "total context exceeds 2^31-1 tokens");
  }
  return r;
}

}  // namespace

Result<std::vector<TraceRequest>> parse_trace(std::string_view text, std::string_view source) {
  std::vector<TraceRequest> out;
  std::unordered_set<uint64_t> ids;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;

    const LineContext ctx(source, line_no);
    json v = json::parse(line, /*cb=*/nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) return ctx.error("", "not valid JSON");
    TRY_ASSIGN(TraceRequest r, parse_request(v, ctx));
    if (!ids.insert(r.id).second) {
      return ctx.error("id", "duplicate id " + std::to_string(r.id));
    }
    if (!out.empty() && r.arrival_s < out.back().arrival_s) {
      return ctx.error("arrival_s",
                       "arrivals must be non-decreasing (previous request arrives at " +
                           json(out.back().arrival_s).dump() + ")");
    }
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<TraceRequest>> read_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot open trace file '", path, "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return make_error("cannot read trace file '", path, "'");
  return parse_trace(buf.str(), path);
}

std::string trace_request_to_line(const TraceRequest& r) {
  // The writer only sees traces built by code, so a malformed one is a bug, not user input.
  CHECK(!r.segments.empty());
  CHECK_GE(r.prompt_tokens, 1);
  nlohmann::ordered_json segs = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.segments.size(); ++i) {
    const Segment& s = r.segments[i];
    const bool last = i + 1 == r.segments.size();
    CHECK_GE(s.generate_tokens, 1);
    CHECK_EQ(s.tool.empty(), last);
    // ordered_json keeps the documented key order, which makes files easier to read and diff.
    nlohmann::ordered_json o;
    o["generate_tokens"] = s.generate_tokens;
    if (!last) {
      CHECK(std::isfinite(s.tool_seconds) && s.tool_seconds >= 0.0);
      CHECK_GE(s.return_tokens, 0);
      o["tool"] = s.tool;
      o["tool_seconds"] = s.tool_seconds;
      o["return_tokens"] = s.return_tokens;
    } else {
      CHECK_EQ(s.tool_seconds, 0.0);
      CHECK_EQ(s.return_tokens, 0);
    }
    segs.push_back(std::move(o));
  }
  nlohmann::ordered_json o;
  o["id"] = r.id;
  o["arrival_s"] = r.arrival_s;
  o["augmentation"] = r.augmentation;
  o["prompt_tokens"] = r.prompt_tokens;
  o["seed"] = r.seed;
  o["segments"] = std::move(segs);
  // nlohmann prints doubles with the shortest text that parses back to the same bits, so a
  // written trace replays exactly.
  return o.dump();
}

Status write_trace(const std::string& path, const std::vector<TraceRequest>& requests) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error("cannot open '", path, "' for writing");
  for (const TraceRequest& r : requests) out << trace_request_to_line(r) << '\n';
  out.flush();
  if (!out) return make_error("error while writing '", path, "'");
  return ok_status();
}

}  // namespace infercept
