// pier-run: finding the processes the ranks left behind (leftovers.hpp).
#include "leftovers.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace pier::run {
namespace {

/// The parent pid in /proc/<pid>/stat, or -1 (gone, or unreadable).
pid_t parent_of(const char* pid) {
  const std::string path = std::string("/proc/") + pid + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[512] = {};
  const ::ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  // "pid (command) state ppid ...": the command may hold spaces and ')'.
  const char* after = n > 0 ? std::strrchr(text, ')') : nullptr;
  int parent = -1;
  if (after == nullptr || std::sscanf(after + 1, " %*c %d", &parent) != 1) return -1;
  return parent;
}

}  // namespace

bool become_subreaper() noexcept {
  return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
}

std::vector<pid_t> own_children(const std::vector<pid_t>& except) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  const pid_t me = ::getpid();
  while (const ::dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (parent_of(e->d_name) != me) continue;
    if (std::find(except.begin(), except.end(), static_cast<pid_t>(pid)) != except.end()) continue;
    out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return out;
}

}  // namespace pier::run
