// The lexer: tags are found first (with their whitespace-control marks), then the text between
// them is trimmed, then each tag's inside is cut into names, literals and operators.
#include "tokenizer/jinja/lexer.h"

#include "tokenizer/utf8.h"

#include <cctype>

namespace mlaserve::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

Status LineError(int line, const std::string& message) {
  return Status::Error("line " + std::to_string(line) + ": " + message);
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(source) {}

  Result<std::vector<Token>> Run() {
    // Jinja drops a single trailing newline of the template (keep_trailing_newline=False).
    if (!src_.empty() && src_.back() == '\n') src_.remove_suffix(1);
    bool trim_next_newline = false;   // trim_blocks after a block or comment tag
    bool strip_next_space = false;    // `-` at the end of the previous tag
    while (pos_ < src_.size()) {
      const size_t open = FindTagOpen(pos_);
      std::string text(src_.substr(pos_, open - pos_));
      const int text_line = line_;
      CountLines(pos_, open);
      pos_ = open;
      // How the coming tag trims the text before it.
      char tag = 0;
      bool strip_before = false, keep_before = false;
      if (open < src_.size()) {
        tag = src_[open + 1];
        strip_before = open + 2 < src_.size() && src_[open + 2] == '-';
        keep_before = open + 2 < src_.size() && src_[open + 2] == '+';
      }
      if (strip_next_space) {
        size_t i = 0;
        while (i < text.size() && IsSpace(text[i])) ++i;
        text.erase(0, i);
      } else if (trim_next_newline) {
        if (text.starts_with("\n")) text.erase(0, 1);
        else if (text.starts_with("\r\n")) text.erase(0, 2);
      }
      if (strip_before) {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if ((tag == '%' || tag == '#') && !keep_before) {
        // lstrip_blocks: only when nothing but spaces/tabs sits between line start and the tag.
        size_t i = text.size();
        while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t')) --i;
        size_t j = open;
        while (j > 0 && (src_[j - 1] == ' ' || src_[j - 1] == '\t')) --j;
        const bool at_line_start = (j == 0 || src_[j - 1] == '\n');
        if (at_line_start) text.resize(i);
      }
      if (!text.empty()) tokens_.push_back({TokenKind::kText, std::move(text), text_line});
      if (open >= src_.size()) break;
      const int tag_line = line_;
      pos_ = open + 2 + ((strip_before || keep_before) ? 1 : 0);
      if (tag == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string_view::npos) return LineError(tag_line, "unterminated comment");
        strip_next_space = close > pos_ && src_[close - 1] == '-';
        trim_next_newline = true;
        CountLines(pos_, close + 2);
        pos_ = close + 2;
        continue;
      }
      const bool block = tag == '%';
      tokens_.push_back({block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", tag_line});
      bool closed = false;
      MLA_RETURN_IF_ERROR(LexInside(block ? '%' : '}', &closed, &strip_next_space));
      if (!closed) return LineError(tag_line, std::string("unterminated ") + (block ? "'{%'" : "'{{'"));
      tokens_.push_back({block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", line_});
      trim_next_newline = block;
    }
    tokens_.push_back({TokenKind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t FindTagOpen(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  void CountLines(size_t from, size_t to) {
    for (size_t i = from; i < to && i < src_.size(); ++i) line_ += src_[i] == '\n';
  }

  // Tokens inside {{ }} or {% %} up to the closing mark; `close` is '}' or '%'.
  Status LexInside(char close, bool* closed, bool* strip_after) {
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (IsSpace(c)) {
        line_ += c == '\n';
        ++pos_;
        continue;
      }
      if (c == '-' && pos_ + 2 < src_.size() && src_[pos_ + 1] == close && src_[pos_ + 2] == '}') {
        pos_ += 3;
        *closed = true;
        *strip_after = true;
        return Status::Ok();
      }
      if (c == '+' && pos_ + 2 < src_.size() && src_[pos_ + 1] == close && src_[pos_ + 2] == '}') {
        pos_ += 3;
        *closed = true;
        *strip_after = false;
        return Status::Ok();
      }
      if (c == close && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}') {
        // `}}` also ends a dict literal inside {{ }}; a tag end needs no open brace pending.
        if (close != '}' || brace_depth_ == 0) {
          pos_ += 2;
          *closed = true;
          *strip_after = false;
          return Status::Ok();
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        tokens_.push_back({TokenKind::kName, std::string(src_.substr(start, pos_ - start)), line_});
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        const size_t start = pos_;
        bool is_float = false;
        while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
          is_float = true;
          ++pos_;
          while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
        }
        if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
          size_t p = pos_ + 1;
          if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
          if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
            is_float = true;
            pos_ = p;
            while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
          }
        }
        std::string digits;
        for (char d : src_.substr(start, pos_ - start)) {
          if (d != '_') digits += d;
        }
        tokens_.push_back({is_float ? TokenKind::kFloat : TokenKind::kInt, digits, line_});
        continue;
      }
      if (c == '\'' || c == '"') {
        MLA_RETURN_IF_ERROR(LexString(c));
        continue;
      }
      static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
      bool matched = false;
      for (std::string_view op : kTwoChar) {
        if (src_.substr(pos_, 2) == op) {
          tokens_.push_back({TokenKind::kOperator, std::string(op), line_});
          pos_ += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (std::string_view("+-*/%~=<>()[]{},.:|").find(c) != std::string_view::npos) {
        if (c == '{') ++brace_depth_;
        if (c == '}' && brace_depth_ > 0) --brace_depth_;
        tokens_.push_back({TokenKind::kOperator, std::string(1, c), line_});
        ++pos_;
        continue;
      }
      return LineError(line_, std::string("unexpected character '") + c + "'");
    }
    return Status::Ok();
  }

  // Python string literal escapes: \n \t \r \\ \' \" \uXXXX; others stay as written.
  Status LexString(char quote) {
    const int start_line = line_;
    std::string out;
    ++pos_;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      char c = src_[pos_];
      line_ += c == '\n';
      if (c == '\\' && pos_ + 1 < src_.size()) {
        const char e = src_[pos_ + 1];
        pos_ += 2;
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case '\\': out += '\\'; break;
          case '\'': out += '\''; break;
          case '"': out += '"'; break;
          case 'u': {
            char32_t cp = 0;
            for (int k = 0; k < 4; ++k) {
              const char h = pos_ + size_t(k) < src_.size() ? src_[pos_ + size_t(k)] : '\0';
              const int digit = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
              if (digit < 0) return LineError(line_, "bad \\u escape (four hex digits)");
              cp = cp * 16 + char32_t(digit);
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) return LineError(line_, "\\u escape of a surrogate is not supported");
            pos_ += 4;
            AppendCodePoint(cp, &out);
            break;
          }
          default: out += '\\'; out += e;
        }
        continue;
      }
      out += c;
      ++pos_;
    }
    if (pos_ >= src_.size()) return LineError(start_line, "unterminated string");
    ++pos_;
    tokens_.push_back({TokenKind::kString, std::move(out), start_line});
    return Status::Ok();
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  int brace_depth_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace mlaserve::jinja
