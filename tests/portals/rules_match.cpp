#include "rules_job.hpp"

namespace pier::portals::rules {

const Rule matching_rules[] = {
    {nullptr, nullptr},
};

}  // namespace pier::portals::rules
