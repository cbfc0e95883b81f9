// pier conformance: the harness shared by every conformance test. Each test
// runs once per driver spec in builtin_drivers() (and "fault:<driver>" with
// injection off), named Conformance/<cell>.<Test>, e.g. Conformance/shm.Sizes
// or Conformance/fault_tcp.Ordering. Filter one driver with
//   --gtest_filter='Conformance/shm.*'
//
// Every wait is bounded: helpers poll with a deadline and return timeout
// instead of hanging, and the test then fails.
#pragma once

#include <gtest/gtest.h>
#include <pier/driver.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <ostream>

#include <span>
#include <string>
#include <string_view>
#include <vector>
#include "base/config.hpp"

namespace pier {
/// GoogleTest prints statuses by name.
inline void PrintTo(Status s, std::ostream* os) {
  *os << to_string(s);
}
}  // namespace pier

namespace pier::conformance {

using pier::driver::Caps;
using pier::driver::Clock;
using pier::driver::Context;
using pier::driver::Deadline;
using pier::driver::Instance;
using pier::driver::Packet;
using pier::driver::Properties;
using pier::driver::Track;

/// The longest any single wait in a test may take.
inline constexpr std::chrono::seconds wait_limit{30};
inline Deadline deadline_after(std::chrono::milliseconds ms) {
  return Clock::now() + ms;
}
inline Deadline default_deadline() {
  return Clock::now() + wait_limit;
}

/// Every driver spec the suite runs over.
std::vector<std::string> driver_specs();
/// The spec as it appears in a test name ("fault:shm" -> "fault_shm").
std::string cell_name(std::string_view spec);
/// Drivers that cannot reach another process (the fork cases skip them).
bool in_process_only(std::string_view spec);

/// A context brought up: properties() then init().
struct Node {
  std::unique_ptr<Context> ctx;
  Properties props;
  std::vector<std::byte> url;
};

/// Creates and initialises a context; ok, or the failing status.
Status make_node(std::string_view spec, Node& node,
                 const pier::driver::Hints& hints = pier::driver::Hints{});

/// Completes connect_async()'d instances: connect_wait() in short slices on
/// each until all answer ok (or unsupported: fully asynchronous) or one fails.
Status finish_connect(std::span<Instance* const> instances, Deadline deadline);

/// An instance of `x` connected to `y` and one of `y` connected to `x`.
struct Link {
  std::unique_ptr<Instance> a;  ///< in x
  std::unique_ptr<Instance> b;  ///< in y
};
Status connect_link(Node& x, Node& y, Track track, Link& link);

/// Calls `step` until it returns true or the deadline passes (timeout).
Status drive(const std::function<bool()>& step, Deadline deadline);

/// Polls a posted send (or receive) until it is final: ok or an error.
Status finish_send(Instance& tx, Packet& pkt, Deadline deadline);
Status finish_recv(Instance& rx, Packet& pkt, Deadline deadline);
/// Polls a posted send and a posted receive together until both are final;
/// in-process peers may need each other polled to progress.
Status finish_both(Instance& tx, Packet& s, Status* send_status, Instance& rx, Packet& r,
                   Deadline deadline);

/// Receives one packet into `dst` with whatever the driver offers (a posted
/// iovec, else a buffer receive). `got` is the packet length (the bytes kept
/// on truncation). Returns the receive's final status.
Status recv_bytes(Instance& rx, const Caps& caps, std::span<std::byte> dst, std::size_t* got,
                  Deadline deadline);

/// Sends `src` as one iovec packet and receives it into `dst` (posted first
/// when the driver takes posted receives). Returns the receive's status.
Status round_trip(Instance& tx, Instance& rx, const Caps& caps, std::span<const std::byte> src,
                  std::span<std::byte> dst, std::size_t* got);

/// Deterministic content: byte i of a packet with this seed.
std::byte pattern_byte(std::uint64_t seed, std::size_t i);
void fill_pattern(std::span<std::byte> out, std::uint64_t seed);
/// Index of the first byte that differs from the pattern, or out.size().
std::size_t check_pattern(std::span<const std::byte> in, std::uint64_t seed);

/// The fixture: one driver spec per registered test.
class DriverTest : public ::testing::Test {
 public:
  void set_spec(std::string spec) { spec_ = std::move(spec); }

 protected:
  /// Skips (with the reason) when the driver cannot run on this machine.
  void SetUp() override;
  const std::string& spec() const { return spec_; }

  std::string spec_;
  /// For "fault:<driver>": injection forced off, whatever the environment says.
  std::unique_ptr<pier::config::ScopedSet> no_faults_;
};

using CaseFactory = DriverTest* (*)();
/// Registers one conformance case for every driver spec.
bool register_case(const char* name, const char* file, int line, CaseFactory make);

}  // namespace pier::conformance

/// CONFORMANCE_TEST(Sizes) { ... } defines a test run once per driver; the
/// body reads spec() and makes its contexts with make_node(spec(), ...).
#define CONFORMANCE_TEST(name)                                                                 \
  class name##_Conformance final : public ::pier::conformance::DriverTest {                    \
    void TestBody() override;                                                                  \
  };                                                                                           \
  [[maybe_unused]] static const bool name##_registered = ::pier::conformance::register_case(   \
      #name, __FILE__, __LINE__,                                                               \
      []() { return static_cast<::pier::conformance::DriverTest*>(new name##_Conformance); }); \
  void name##_Conformance::TestBody()
