// The model flags every model-building command reads (cli/model_setup.h): what reaches
// ModelOptions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/model_setup.h"

namespace mlaserve::cli {
namespace {

// ReadModelFlags over `flags` (what follows the command name); Finish must accept them.
ModelFlags Read(std::vector<std::string> flags) {
  std::vector<char*> argv;
  for (std::string& f : flags) argv.push_back(f.data());
  Args args("generate", "test", int(argv.size()), argv.data());
  ModelFlags read = ReadModelFlags(args);
  EXPECT_FALSE(args.Finish().has_value());
  return read;
}

TEST(ModelFlags, EnableDeterministicInferenceSetsTheModelOption) {
  EXPECT_FALSE(Read({"--model-path", "m"}).options.deterministic);
  EXPECT_TRUE(Read({"--model-path", "m", "--enable-deterministic-inference"}).options.deterministic);
  // ... for the engine commands' forward sizing too.
  std::vector<std::string> flags = {"--enable-deterministic-inference"};
  std::vector<char*> argv = {flags[0].data()};
  Args args("serve", "test", 1, argv.data());
  EXPECT_TRUE(ReadModelFlags(args, ForwardSize::kEngineStep).options.deterministic);
}

}  // namespace
}  // namespace mlaserve::cli
