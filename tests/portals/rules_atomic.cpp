#include "rules_job.hpp"

namespace pier::portals::rules {

const Rule atomic_rules[] = {
    {nullptr, nullptr},
};

}  // namespace pier::portals::rules
