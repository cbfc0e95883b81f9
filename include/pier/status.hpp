// pier: the one status list. Every layer reports errors as a Status; the C
// entry points map it to PTL_* (or PIER_PORT_*) exactly once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pier {

/// What an error dooms: only this operation, every operation to this peer,
/// or the whole network interface.
enum class Scope : std::uint8_t { op, peer, ni };

// X(name, scope, text): the single definition of every status.
#define PIER_STATUS_LIST(X)                                         \
  X(ok, op, "success")                                              \
  X(in_progress, op, "posted, completes later")                     \
  X(no_resource, op, "no room now, retry after progress")           \
  X(unsupported, op, "not implemented by this component")           \
  X(invalid_argument, op, "invalid argument")                       \
  X(truncated, op, "message longer than the buffer, truncated")     \
  X(canceled, op, "operation canceled")                             \
  X(timeout, op, "deadline passed before completion")               \
  X(not_found, op, "no such object")                                \
  X(in_use, op, "object is in use")                                 \
  X(rejected, op, "rejected by the target")                         \
  X(dropped, op, "dropped before delivery")                         \
  X(permission_denied, op, "permission denied")                     \
  X(malformed, peer, "malformed data from the peer")                \
  X(version_mismatch, peer, "peer speaks another protocol version") \
  X(closed, peer, "connection closed")                              \
  X(broken, peer, "peer unreachable or dead")                       \
  X(no_memory, ni, "out of memory")                                 \
  X(not_initialized, ni, "not initialized or already closed")       \
  X(system_error, ni, "operating system call failed")               \
  X(internal, ni, "internal error")

enum class Status : std::uint8_t {
#define PIER_STATUS_ENUM(name, scope, text) name,
  PIER_STATUS_LIST(PIER_STATUS_ENUM)
#undef PIER_STATUS_ENUM
};

inline constexpr std::size_t status_count = 0
// NOLINTNEXTLINE(bugprone-macro-parentheses): a term of the sum above
#define PIER_STATUS_COUNT(name, scope, text) +1
    PIER_STATUS_LIST(PIER_STATUS_COUNT)
#undef PIER_STATUS_COUNT
    ;

/// The enumerator's name, e.g. "no_resource".
constexpr std::string_view to_string(Status s) noexcept {
  switch (s) {
#define PIER_STATUS_NAME(name, scope, text) \
  case Status::name:                        \
    return #name;
    PIER_STATUS_LIST(PIER_STATUS_NAME)
#undef PIER_STATUS_NAME
  }
  return "unknown_status";
}

/// A sentence for humans, e.g. "no room now, retry after progress".
constexpr std::string_view describe(Status s) noexcept {
  switch (s) {
#define PIER_STATUS_TEXT(name, scope, text) \
  case Status::name:                        \
    return text;
    PIER_STATUS_LIST(PIER_STATUS_TEXT)
#undef PIER_STATUS_TEXT
  }
  return "unknown status";
}

constexpr Scope scope_of(Status s) noexcept {
  // One case per status, from the list: equal branches are expected.
  switch (s) {
#define PIER_STATUS_SCOPE(name, scope, text) \
  case Status::name:                         \
    return Scope::scope;
    // NOLINTNEXTLINE(bugprone-branch-clone)
    PIER_STATUS_LIST(PIER_STATUS_SCOPE)
#undef PIER_STATUS_SCOPE
  }
  return Scope::ni;
}

/// True for ok and in_progress: the operation is alive.
constexpr bool is_success(Status s) noexcept {
  return s == Status::ok || s == Status::in_progress;
}

}  // namespace pier
