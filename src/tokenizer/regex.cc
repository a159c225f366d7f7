// PCRE2 compile/match with the options every tokenizer pattern needs.
#include "tokenizer/regex.h"

#include <string_view>
#include <utility>

namespace mlaserve {
namespace {

std::string Pcre2ErrorMessage(int error_code) {
  PCRE2_UCHAR buffer[256];
  const int length = pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  if (length < 0) return "PCRE2 error " + std::to_string(error_code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(length));
}

// Unicode's White_Space property, which `\s` means in Oniguruma and Rust's regex (what Hugging
// Face tokenizers run). PCRE2's `\s` under UCP also matches U+180E MONGOLIAN VOWEL SEPARATOR
// (White_Space only before Unicode 6.3), so tokenizer patterns spell the class out instead.
// White_Space is a stable property: this list does not depend on the host's PCRE2 tables.
constexpr std::string_view kWhiteSpaceItems =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// `\s` -> the White_Space class (its items, inside a character class), `\S` outside a class ->
// its negation. `\S` inside a class cannot be spelled as items; it is left to PCRE2 (no
// tokenizer pattern we know uses it).
std::string WithUnicodeWhiteSpace(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  int class_depth = 0;  // > 0 inside [...] (POSIX [:name:] nests one more)
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[i + 1];
      if (next == 's') {
        if (class_depth > 0) out.append(kWhiteSpaceItems);
        else out.append("[").append(kWhiteSpaceItems).append("]");
      } else if (next == 'S' && class_depth == 0) {
        out.append("[^").append(kWhiteSpaceItems).append("]");
      } else {
        out.append(pattern.substr(i, 2));
      }
      ++i;
      continue;
    }
    if (c == '[') {
      if (class_depth == 0 || (i + 1 < pattern.size() && pattern[i + 1] == ':')) ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (class_depth == 1) {
        if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
        if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      }
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

}  // namespace

RegexMatchData::RegexMatchData() : data_(pcre2_match_data_create(1, nullptr)) {}

Result<Regex> Regex::Compile(std::string_view pattern, Syntax syntax) {
  // UCP makes \s, \w, \d and POSIX classes Unicode-aware, as Oniguruma and Rust's regex are.
  // A literal has no classes, and PCRE2 refuses UCP together with LITERAL.
  const uint32_t options =
      syntax == Syntax::kLiteral ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  const std::string compiled = syntax == Syntax::kLiteral ? std::string(pattern) : WithUnicodeWhiteSpace(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* raw = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                  options, &error_code, &error_offset, nullptr);
  if (raw == nullptr) {
    return Status::Error("regex does not compile: " + Pcre2ErrorMessage(error_code) +
                         " at offset " + std::to_string(error_offset) + " in \"" +
                         std::string(pattern) + "\"");
  }
  std::unique_ptr<pcre2_code, Deleter> code(raw);
  // JIT is an optimisation only: when this PCRE2 build lacks it the interpreter runs instead.
  (void)pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
  return Regex(std::move(code), std::string(pattern));
}

Result<bool> Regex::Find(std::string_view text, size_t start, const RegexMatchData& scratch,
                         RegexMatch* match) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // The caller validated the whole text once; checking it again per call would be O(n^2).
  int rc = pcre2_match(code_.get(), subject, text.size(), start, PCRE2_NO_UTF_CHECK, scratch.get(),
                       nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    // A pathological input outgrew the JIT's machine stack; the interpreter uses the heap.
    rc = pcre2_match(code_.get(), subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                     scratch.get(), nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    return Status::Error("regex match failed: " + Pcre2ErrorMessage(rc) + " (pattern \"" +
                         pattern_ + "\")");
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.get());
  match->begin = ovector[0];
  match->end = ovector[1];
  return true;
}

}  // namespace mlaserve
