// Percentile against numpy.percentile's default (linear) method.
#include "core/percentile.h"

#include <gtest/gtest.h>

namespace mlaserve {
namespace {

TEST(Percentile, InterpolatesBetweenClosestRanksAsNumpy) {
  const std::vector<double> v = {4.0, 1.0, 3.0, 2.0};  // unsorted on purpose
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);    // numpy.percentile([1,2,3,4], 50)
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 3.97);   // numpy.percentile([1,2,3,4], 99)
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(Percentile({7.0}, 95), 7.0);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0.0);
}

}  // namespace
}  // namespace mlaserve
