// The machine's read bandwidth, measured in the run that reports figures against it.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace mlaserve::cli {

// Best-of-`repeats` read bandwidth in bytes/s over a `bytes` buffer (much larger than the
// caches), every pool thread reading a disjoint slice: the access pattern of a decode step's
// weight reads, done as fast as this code knows how.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int repeats);

}  // namespace mlaserve::cli
