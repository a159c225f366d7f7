// Which Unicode version the tokenizer's character classes follow. Pre-tokenizer patterns run on
// the host's libpcre2, whose \p{L}, \p{N}, \p{M} and script tables are those of the Unicode
// version it was built with; `\s` is the one class spelled out (regex.cc). mlaserve's tests pass
// with one version (kTestedUnicodeVersion); another one is reported, not refused (docs/tokenizer.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mlaserve {

// Debian bookworm's libpcre2 10.42, which CI installs (scripts/setup.sh).
inline constexpr std::string_view kTestedUnicodeVersion = "14.0.0";

// The linked libpcre2's Unicode version ("14.0.0") and its own version ("10.42 2022-12-11"),
// read from pcre2_config once.
const std::string& TokenizerUnicodeVersion();
const std::string& Pcre2Version();

// A one-line warning when `unicode_version` is not kTestedUnicodeVersion; nothing when it is.
std::optional<std::string> UnicodeVersionWarning(std::string_view unicode_version);

}  // namespace mlaserve
