// ShardingPlan's rule (core/checkpoint/sharding_plan.h), shared by the plan's placement
// lookups (sharding_plan.cc) and its PLAN.json reader (sharding_plan_json.cc). Not public
// API.
#ifndef SDRT_CORE_CHECKPOINT_INTERNAL_SHARDING_PLAN_RULE_H_
#define SDRT_CORE_CHECKPOINT_INTERNAL_SHARDING_PLAN_RULE_H_

#include <memory>
#include <string>
#include <vector>

#include "re2/re2.h"
#include "sdrt/core/checkpoint/sharding_plan.h"

namespace sdrt {

struct ShardingPlan::Rule {
  std::string pattern;
  std::shared_ptr<const RE2> regex;  // compiled once, shared by copies of the plan
  std::vector<Placement> placements;
};

}  // namespace sdrt

#endif  // SDRT_CORE_CHECKPOINT_INTERNAL_SHARDING_PLAN_RULE_H_
