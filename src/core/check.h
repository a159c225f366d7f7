// Invariant checks: a failed check is a bug in mlaserve, never a client's or a checkpoint's fault
// (those are reported as Status values). Prints file:line and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#define MLA_CHECK(cond)                                                                 \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)
