// pcre2_config queries and the mismatch warning.
#include "tokenizer/unicode_version.h"

#include "tokenizer/regex.h"  // pcre2.h with the 8-bit code unit width

namespace mlaserve {
namespace {

std::string Pcre2ConfigString(uint32_t what) {
  // pcre2_config with a null buffer returns the code units needed, terminator included.
  const int needed = pcre2_config(what, nullptr);
  if (needed <= 0) return "unknown";
  std::string value(static_cast<size_t>(needed), '\0');
  const int written = pcre2_config(what, value.data());
  if (written <= 0) return "unknown";
  value.resize(static_cast<size_t>(written) - 1);  // drop the terminator
  return value;
}

}  // namespace

const std::string& TokenizerUnicodeVersion() {
  static const std::string version = Pcre2ConfigString(PCRE2_CONFIG_UNICODE_VERSION);
  return version;
}

const std::string& Pcre2Version() {
  static const std::string version = Pcre2ConfigString(PCRE2_CONFIG_VERSION);
  return version;
}

std::optional<std::string> UnicodeVersionWarning(std::string_view unicode_version) {
  if (unicode_version == kTestedUnicodeVersion) return std::nullopt;
  return "the tokenizer's character classes follow this host's libpcre2 tables, Unicode " +
         std::string(unicode_version) + ", not the " + std::string(kTestedUnicodeVersion) +
         " mlaserve is tested with: text with characters whose category or script differs "
         "between the two may tokenize differently (docs/tokenizer.md)";
}

}  // namespace mlaserve
