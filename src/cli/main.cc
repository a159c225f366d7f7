// mlaserve: one binary, one subcommand per file in src/cli/.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace mlaserve::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::printf("usage: mlaserve COMMAND [--flag value ...]\n\ncommands:\n");
    for (const Command& c : kCommands) {
      if (!c.hidden) std::printf("  %-14s %s\n", c.name, c.summary);
    }
    std::printf("\n`mlaserve COMMAND --help` lists the command's flags, defaults and accepted values.\n");
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  for (const Command& c : kCommands) {
    if (command != c.name) continue;
    Args args(c.name, c.summary, argc - 2, argv + 2);
    return c.run(args);
  }
  std::fprintf(stderr, "mlaserve: unknown command '%s' (try: mlaserve --help)\n", command.c_str());
  return 2;
}
