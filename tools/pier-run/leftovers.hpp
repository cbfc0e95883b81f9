// pier-run: what ranks leave behind. pier-run is the child subreaper of its
// ranks, so a process a rank started and left running when it exited is
// handed to pier-run instead of init. Those are found here and ended with
// the job: a job leaves nothing running on the host.
#pragma once

#include <sys/types.h>

#include <vector>

namespace pier::run {

/// Makes this process the subreaper of its descendants (false if refused).
bool become_subreaper() noexcept;

/// The children of this process (found in /proc), minus `except`. They stay
/// ours until reaped, so their pids cannot be reused before: signalling
/// them is safe from the thread that reaps.
std::vector<pid_t> own_children(const std::vector<pid_t>& except);

}  // namespace pier::run
