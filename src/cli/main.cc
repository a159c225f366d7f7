// mlaserve: one binary, one subcommand per file in src/cli/.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace mlaserve::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  Args args(argc - 2, argv + 2);
  for (const Command& c : kCommands) {
    if (command == c.name) return c.run(args);
  }
  std::fprintf(stderr, "mlaserve: unknown command '%s' (try: mlaserve --help)\n", command.c_str());
  return 2;
}
