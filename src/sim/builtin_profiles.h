// GPU hardware profiles that ship with mlaserve (`simulate --hardware h200`), as the JSON a user
// would write (docs/simulate.md, "Hardware profiles"): datasheet rates, and efficiencies that
// are assumptions taken from published kernel and serving figures, each named in "sources".
#pragma once

#include <string_view>
#include <vector>

namespace mlaserve {

struct BuiltinProfile {
  std::string_view name;
  std::string_view json;
};

const std::vector<BuiltinProfile>& BuiltinProfiles();

}  // namespace mlaserve
