// The logger: SGLang's line format, and every level a real threshold (warning keeps warnings,
// error drops them), in-process and through --log-level on a command.
#include "core/log.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "support/run_binary.h"

namespace mlaserve {
namespace {

// What Log writes at `threshold` for one line at each level.
std::string LogAtEveryLevel(LogLevel threshold) {
  SetLogLevel(threshold);
  ::testing::internal::CaptureStderr();
  Log(LogLevel::kDebug, "debug line");
  Log(LogLevel::kInfo, "info line %d", 1);
  Log(LogLevel::kWarning, "warning line");
  Log(LogLevel::kError, "error line");
  const std::string out = ::testing::internal::GetCapturedStderr();
  SetLogLevel(LogLevel::kInfo);
  return out;
}

TEST(Log, EachLevelDropsWhatIsBelowIt) {
  const std::string stamp = R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] )";
  EXPECT_TRUE(std::regex_match(LogAtEveryLevel(LogLevel::kDebug),
                               std::regex(stamp + "debug line\n" + stamp + "info line 1\n" + stamp + "warning line\n" +
                                          stamp + "error line\n")));
  EXPECT_EQ(LogAtEveryLevel(LogLevel::kInfo).find("debug"), std::string::npos);
  const std::string warning = LogAtEveryLevel(LogLevel::kWarning);
  EXPECT_EQ(warning.find("info line"), std::string::npos) << warning;
  EXPECT_NE(warning.find("warning line"), std::string::npos) << warning;
  const std::string error = LogAtEveryLevel(LogLevel::kError);
  EXPECT_EQ(error.find("warning line"), std::string::npos) << error;
  EXPECT_NE(error.find("error line"), std::string::npos) << error;
}

TEST(Log, LongLinesAreWrittenWhole) {
  const std::string long_text(2000, 'x');
  ::testing::internal::CaptureStderr();
  Log(LogLevel::kError, "%s|end", long_text.c_str());
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find(long_text + "|end\n"), std::string::npos);
}

TEST(Log, ParsesSGLangLevelNames) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("loud").ok());
}

// --log-level on a command: its info lines go at warning, its warnings only at error.
TEST(Log, CommandsHonourLogLevel) {
  const std::string base = "generate --model-path " +
                           testing::ShellQuote(std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla") +
                           " --prompt 'KING:' --max-new-tokens 2 --trust-remote-code --log-level ";
  const testing::CommandResult info = testing::RunMlaserve(base + "info");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.err.find("] [mlaserve] model="), std::string::npos) << info.err;
  EXPECT_NE(info.err.find("--trust-remote-code has no effect"), std::string::npos) << info.err;
  const testing::CommandResult warning = testing::RunMlaserve(base + "warning");
  ASSERT_EQ(warning.exit_code, 0) << warning.err;
  EXPECT_EQ(warning.err.find("[mlaserve] model="), std::string::npos) << warning.err;
  EXPECT_NE(warning.err.find("--trust-remote-code has no effect"), std::string::npos) << warning.err;
  const testing::CommandResult error = testing::RunMlaserve(base + "error");
  ASSERT_EQ(error.exit_code, 0) << error.err;
  EXPECT_EQ(error.err, "");
  EXPECT_EQ(error.out, info.out);  // the generated text is output, not a log line
}

}  // namespace
}  // namespace mlaserve
