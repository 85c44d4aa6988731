#include "tokenizer/jinja/lexer.h"

#include <cstring>

#include "tokenizer/unicode.h"

namespace infercept::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_blank_text(const std::string& s, size_t from) {
  if (from >= s.size()) return false;  // jinja2 needs at least one blank to strip
  for (size_t i = from; i < s.size(); ++i)
    if (!is_space(s[i])) return false;
  return true;
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// \r\n and \r as \n, and the one trailing newline jinja2 drops (keep_trailing_newline off).
std::string normalize(const std::string& in) {
  std::string s;
  s.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      s += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      s += in[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A string literal's body with Python's escapes resolved (jinja2 decodes it with
// "unicode-escape"); an unknown escape stays as written.
std::string unescape(const std::string& body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\n':
        break;  // line continuation
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        bool ok = true;
        for (size_t k = 1; ok && k <= n; ++k) {
          if (i + k >= body.size() || hex_value(body[i + k]) < 0) {
            ok = false;
            break;
          }
          cp = cp * 16 + uint32_t(hex_value(body[i + k]));
        }
        if (!ok || cp > 0x10FFFF) {
          out += '\\';
          out += c;
        } else {
          unicode::append_utf8(out, cp);
          i += n;
        }
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = uint32_t(c - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            cp = cp * 8 + uint32_t(body[++i] - '0');
          unicode::append_utf8(out, cp);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : s_(normalize(src)) {}

  Result<std::vector<Token>> run() {
    while (pos_ < s_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = s_.substr(pos_, tag - pos_);
      if (tag == s_.size()) {
        emit(TokenType::text, text);
        break;
      }
      const char kind = s_[tag + 1];  // '{' variable, '%' block, '#' comment
      const char sign = tag + 2 < s_.size() ? s_[tag + 2] : 0;
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && is_space(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && kind != '{') {
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting_) && is_blank_text(text, l_pos)) text.resize(l_pos);
      }
      emit(TokenType::text, text);
      line_ += count_lines(pos_, tag);
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      line_starting_ = false;
      if (kind == '#') {
        if (auto st = comment(); !st.ok()) return st.error();
      } else if (kind == '%' && raw_begins()) {
        if (auto st = raw(); !st.ok()) return st.error();
      } else {
        if (auto st = tag_body(kind == '%'); !st.ok()) return st.error();
      }
    }
    tokens_.push_back(Token{TokenType::eof, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return s_.size();
  }
  int count_lines(size_t b, size_t e) const {
    int n = 0;
    for (size_t i = b; i < e && i < s_.size(); ++i) n += s_[i] == '\n';
    return n;
  }
  void emit(TokenType t, std::string v) {
    if (t == TokenType::text && v.empty()) return;
    tokens_.push_back(Token{t, std::move(v), line_});
  }
  Error error(const std::string& msg) const {
    return make_error("template line ", std::to_string(line_), ": ", msg);
  }

  // After a closing tag: `-` drops the blanks that follow, trim_blocks one newline.
  void after_end(char sign) {
    const size_t start = pos_;
    if (sign == '-') {
      while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
    } else if (sign != '+' && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
    }
    line_ += count_lines(start, pos_);
    line_starting_ = pos_ > 0 && s_[pos_ - 1] == '\n';
  }

  Status comment() {
    const size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) return error("missing end of comment tag");
    const char sign = end > pos_ && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    line_ += count_lines(pos_, end);
    pos_ = end + 2;
    if (sign == '-') {
      after_end('-');
    } else if (sign == '+') {
      after_end('+');
    } else {
      after_end(0);
    }
    return ok_status();
  }

  // {% raw %}: pos_ is after "{%" (and its sign).
  bool raw_begins() const {
    size_t p = pos_;
    while (p < s_.size() && is_space(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") != 0 || (p + 3 < s_.size() && is_name_char(s_[p + 3])))
      return false;
    return true;
  }
  Status raw() {
    size_t p = s_.find("raw", pos_) + 3;
    while (p < s_.size() && is_space(s_[p])) ++p;
    char sign = 0;
    if (p < s_.size() && s_[p] == '-') sign = s_[p++];
    if (s_.compare(p, 2, "%}") != 0) return error("expected '%}' after 'raw'");
    pos_ = p + 2;
    if (sign == '-') after_end('-');
    // The body runs to {% endraw %}, taken as text.
    for (size_t q = s_.find("{%", pos_); q != std::string::npos; q = s_.find("{%", q + 2)) {
      size_t r = q + 2;
      char open_sign = 0;
      if (r < s_.size() && (s_[r] == '-' || s_[r] == '+')) open_sign = s_[r++];
      while (r < s_.size() && is_space(s_[r])) ++r;
      if (s_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < s_.size() && is_space(s_[r])) ++r;
      char close_sign = 0;
      if (r < s_.size() && (s_[r] == '-' || s_[r] == '+')) close_sign = s_[r++];
      if (s_.compare(r, 2, "%}") != 0) continue;
      std::string text = s_.substr(pos_, q - pos_);
      if (open_sign == '-') {
        size_t e = text.size();
        while (e > 0 && is_space(text[e - 1])) --e;
        text.resize(e);
      } else if (open_sign != '+') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting_) && is_blank_text(text, l_pos)) text.resize(l_pos);
      }
      emit(TokenType::text, text);
      line_ += count_lines(pos_, r);
      pos_ = r + 2;
      after_end(close_sign);
      return ok_status();
    }
    return error("missing {% endraw %}");
  }

  // The tokens of a {{ }} or {% %} tag, pos_ after its opening.
  Status tag_body(bool block) {
    emit(block ? TokenType::block_begin : TokenType::var_begin, block ? "{%" : "{{");
    const char close = block ? '%' : '}';
    std::vector<char> brackets;
    while (true) {
      while (pos_ < s_.size() && is_space(s_[pos_])) {
        line_ += s_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= s_.size()) return error(block ? "missing '%}'" : "missing '}}'");
      if (brackets.empty()) {
        char sign = 0;
        size_t p = pos_;
        if (s_[p] == '-' || (block && s_[p] == '+')) sign = s_[p++];
        if (p + 1 < s_.size() && s_[p] == close && s_[p + 1] == '}') {
          pos_ = p + 2;
          emit(block ? TokenType::block_end : TokenType::var_end, block ? "%}" : "}}");
          if (block) {
            after_end(sign);
          } else if (sign == '-') {
            after_end('-');
          } else {
            line_starting_ = false;
          }
          return ok_status();
        }
      }
      const char c = s_[pos_];
      if (c == '\'' || c == '"') {
        size_t p = pos_ + 1;
        while (p < s_.size() && s_[p] != c) p += s_[p] == '\\' ? 2 : 1;
        if (p >= s_.size()) return error("unterminated string literal");
        const std::string body = s_.substr(pos_ + 1, p - pos_ - 1);
        emit(TokenType::string, unescape(body));
        line_ += count_lines(pos_, p);
        pos_ = p + 1;
      } else if (is_digit(c)) {
        size_t p = pos_;
        while (p < s_.size() && (is_digit(s_[p]) || s_[p] == '_')) ++p;
        bool is_float = false;
        if (p + 1 < s_.size() && s_[p] == '.' && is_digit(s_[p + 1])) {
          is_float = true;
          ++p;
          while (p < s_.size() && (is_digit(s_[p]) || s_[p] == '_')) ++p;
        }
        if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
          size_t q = p + 1;
          if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
          if (q < s_.size() && is_digit(s_[q])) {
            is_float = true;
            p = q;
            while (p < s_.size() && is_digit(s_[p])) ++p;
          }
        }
        std::string num;
        for (size_t i = pos_; i < p; ++i)
          if (s_[i] != '_') num += s_[i];
        emit(is_float ? TokenType::floating : TokenType::integer, num);
        pos_ = p;
      } else if (is_name_start(c)) {
        size_t p = pos_;
        while (p < s_.size() && is_name_char(s_[p])) ++p;
        emit(TokenType::name, s_.substr(pos_, p - pos_));
        pos_ = p;
      } else {
        static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two)
          if (s_.compare(pos_, 2, t) == 0) op = t;
        if (op.empty()) {
          if (!std::strchr("+-*/%~<>=()[]{}.,:|", c))
            return error(std::string("unexpected character '") + c + "'");
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          brackets.push_back(op[0]);
        } else if (op == ")" || op == "]" || op == "}") {
          const char want = op == ")" ? '(' : op == "]" ? '[' : '{';
          if (brackets.empty() || brackets.back() != want) return error("unbalanced '" + op + "'");
          brackets.pop_back();
        }
        emit(TokenType::op, op);
        pos_ += op.size();
      }
    }
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> tokenize(const std::string& source) {
  return Lexer(source).run();
}

}  // namespace infercept::jinja
