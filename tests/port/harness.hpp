// Test helpers for the port layer: several nodes in one process (one Core
// each, over the drivers named), and a Driver that runs a port's event loop,
// recording receive events and send completions and handing every other
// event to unknown(), checking the token invariant (G1, G2) as it goes.
#pragma once

#include <gtest/gtest.h>
#include <pier/port.hpp>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.hpp"
#include "base/config.hpp"
#include "base/log.hpp"
#include "core/core.hpp"

namespace pier::port::test {

/// n nodes over `drivers` in this process.
class World {
 public:
  World(unsigned n, const std::string& drivers) : drivers_("CORE_DRIVERS", drivers) {
    for (unsigned r = 0; r < n; ++r) {
      auto c = core::Core::create(r, n);
      if (!c) {
        status = c.status();
        return;
      }
      cores.push_back(std::move(*c));
    }
    std::vector<std::vector<std::byte>> addresses;
    for (auto& c : cores) addresses.push_back(c->address());
    for (auto& c : cores) {
      status = c->connect(addresses);
      if (status != Status::ok) return;
      auto node = Node::attach(*c);
      if (!node) {
        status = node.status();
        return;
      }
      nodes.push_back(std::move(*node));
    }
  }
  ~World() {
    nodes.clear();  // ports are gone already: the Drivers of a test die first
    cores.clear();
  }
  Status status = Status::ok;
  std::vector<std::unique_ptr<core::Core>> cores;
  std::vector<std::unique_ptr<Node>> nodes;

 private:
  config::ScopedSet drivers_;
};

struct Completion {
  std::uintptr_t id;
  Status status;
};

struct Received {
  Event event;
  std::vector<std::byte> data;
};

/// One open port and what happened on it.
class Driver {
 public:
  Driver(Node& node, unsigned id) {
    auto p = node.open(id);
    status = p.status();
    if (p) port = std::move(*p);
    if (port) registry()[port.get()] = this;
  }
  ~Driver() {
    if (port) registry().erase(port.get());
  }

  static void on_sent(Port& p, void* ctx, Status s) {
    Driver* d = registry()[&p];
    d->completions.push_back({reinterpret_cast<std::uintptr_t>(ctx), s});
    ++d->callbacks_in_unknown;
    EXPECT_TRUE(d->in_unknown) << "a callback ran outside unknown()";
  }
  static void* id(std::uintptr_t i) { return reinterpret_cast<void*>(i); }

  Status send(const void* msg, std::size_t len, Priority p, std::uint32_t node, unsigned to,
              std::uintptr_t op_id) {
    Status s = port->send(msg, min_size_for_length(len), len, p, node, to, on_sent, id(op_id));
    if (s == Status::ok) ++outstanding_sends;
    return s;
  }
  Status provide(void* buf, unsigned size, Priority p, std::uint8_t tag = 0) {
    Status s = port->provide_receive_buffer(buf, size, p, tag);
    if (s == Status::ok) ++provided;
    return s;
  }

  /// One receive call; receive events are recorded (and their buffers given
  /// back with unknown() when `reprovide`), others go to unknown().
  void step() {
    const Event& e = port->receive();
    handle(e);
  }
  void handle(const Event& e) {
    if (e.type == PIER_PORT_NO_RECV_EVENT) return;
    if (is_receive_event(e.type)) {
      Received r{e, {}};
      auto* m = static_cast<const std::byte*>(e.message);
      r.data.assign(m, m + e.length);
      received.push_back(std::move(r));
      --provided;
      if (reprovide) {
        port->unknown(e);
        ++provided;
      }
    } else {
      if (e.type == PIER_PORT_ALARM_EVENT) ++alarm_events;
      if (e.type == PIER_PORT_SENT_EVENT) --outstanding_sends;
      in_unknown = true;
      port->unknown(e);
      in_unknown = false;
    }
    check_tokens();
  }
  /// G1/G2: what the client holds plus what pier holds is the total.
  void check_tokens() const {
    EXPECT_EQ(port->send_tokens_held() + outstanding_sends, port->send_tokens());
    EXPECT_EQ(port->receive_tokens_held() + provided, port->receive_tokens());
  }

  Status status;
  std::unique_ptr<Port> port;
  std::vector<Received> received;
  std::vector<Completion> completions;
  unsigned outstanding_sends = 0;
  unsigned provided = 0;
  unsigned alarm_events = 0;
  unsigned callbacks_in_unknown = 0;
  bool reprovide = false;
  bool in_unknown = false;

 private:
  static std::map<Port*, Driver*>& registry() {
    static std::map<Port*, Driver*> r;
    return r;
  }
};

/// Steps every driver until pred() or the deadline (false then).
inline bool run_until(std::initializer_list<Driver*> drivers, const std::function<bool()>& pred,
                      int ms = 10000) {
  auto deadline = base::Deadline::after_ms(ms);
  while (!pred()) {
    if (deadline.expired()) return false;
    for (Driver* d : drivers) d->step();
  }
  return true;
}

/// Steps for `ms` whatever happens (to show that something does not happen).
inline void run_for(std::initializer_list<Driver*> drivers, int ms) {
  auto deadline = base::Deadline::after_ms(ms);
  while (!deadline.expired())
    for (Driver* d : drivers) d->step();
}

inline std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7) & 0xff);
  return v;
}

/// A buffer big enough for size `s`.
inline std::vector<std::byte> buffer_for(unsigned s) {
  return std::vector<std::byte>(static_cast<std::size_t>(max_length_for_size(s)) + 1);
}

}  // namespace pier::port::test
