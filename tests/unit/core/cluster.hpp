// Test helpers: several Cores in one process, wired through their addresses,
// and a recording upper layer that checks the LIB-side contract as it goes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.hpp"
#include "base/config.hpp"
#include "core/core.hpp"

namespace pier::core::test {

inline constexpr std::size_t header_size = 16;

/// One parsed message as the recorder saw it.
struct Parsed {
  Rank source = 0;
  std::uint8_t priority = 0;
  std::uint16_t source_port = 0, destination_port = 0;
  std::vector<std::byte> header;
  std::uint64_t length = 0;
  Incoming* handle = nullptr;
};

/// Records every callback; by default answers each lib_parse at once into
/// a fresh receive buffer of the message's length (its cookie).
class Recorder final : public Client {
 public:
  explicit Recorder(Core& core) : core_(core) {}

  /// Replaces the default answer (called inside lib_parse).
  std::function<void(const Arrival&)> on_parse;
  bool defer = false;  ///< when set, lib_parse returns without recv()

  void lib_parse(const Arrival& a) noexcept override {
    Parsed p;
    p.source = a.source;
    p.priority = a.priority;
    p.source_port = a.source_port;
    p.destination_port = a.destination_port;
    p.header.assign(a.header.begin(), a.header.end());
    p.length = a.length;
    p.handle = a.handle;
    parsed.push_back(std::move(p));
    if (on_parse) return on_parse(a);
    if (defer) return;
    answer(parsed.size() - 1, a.length);
  }

  void lib_finalize(void* cookie, Status status) noexcept override {
    ++finalize_count[cookie];
    finalized.emplace_back(cookie, status);
  }
  void peer_failed(Rank peer) noexcept override {
    failed_peers.push_back(peer);
    finalized_before_failure.push_back(finalized.size());
  }

  /// Largest message the recorder takes whole; a longer one (a damaged
  /// length from the fault driver) is received truncated to it.
  static constexpr std::uint64_t max_take = std::uint64_t{64} << 20;

  /// recv() for parsed message `i` into buffers[i], mlen bytes.
  Status answer(std::size_t i, std::uint64_t mlen) {
    if (buffers.size() <= i) buffers.resize(i + 1);
    auto& buf = buffers[i];
    mlen = std::min(mlen, max_take);
    buf.assign(static_cast<std::size_t>(std::clamp<std::uint64_t>(parsed[i].length, 1, max_take)),
               std::byte{0xee});
    auto region = core_.validate(buf.data(), buf.size());
    if (!region) return region.status();
    regions.push_back(*region);
    return core_.recv(parsed[i].handle, cookie_of(i), &regions.back(), 0,
                      static_cast<std::size_t>(mlen), static_cast<std::size_t>(parsed[i].length));
  }
  static void* cookie_of(std::size_t i) { return reinterpret_cast<void*>(0x1000 + i); }

  std::vector<Parsed> parsed;
  std::vector<std::vector<std::byte>> buffers;
  std::vector<Region> regions;
  std::map<void*, int> finalize_count;
  std::vector<std::pair<void*, Status>> finalized;
  std::vector<Rank> failed_peers;                     ///< peer_failed() calls, in order
  std::vector<std::size_t> finalized_before_failure;  ///< finalized.size() at each

 private:
  Core& core_;
};

/// n cores over the drivers named; every core's recorder is attached as
/// Upper::port with a 16-byte header.
class Cluster {
 public:
  Cluster(Rank n, const std::string& drivers) : drivers_("CORE_DRIVERS", drivers) {
    for (Rank r = 0; r < n; ++r) {
      auto c = Core::create(r, n);
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
      clients.push_back(std::make_unique<Recorder>(*c));
      status = c->attach(wire::Upper::port, clients.back().get(), header_size);
      if (status != Status::ok) return;
    }
  }

  void progress_all() {
    for (auto& c : cores)
      if (c) (void)c->progress();
  }

  /// Progresses every core until pred() or 10 s pass.
  bool run_until(const std::function<bool()>& pred, int ms = 10000) {
    auto deadline = base::Deadline::after_ms(ms);
    while (!pred()) {
      if (deadline.expired()) return false;
      progress_all();
    }
    return true;
  }

  /// Sends `len` bytes of `data` (kept alive by the caller).
  Status send(Rank from, Rank to, std::vector<std::byte>& data, void* cookie,
              std::uint8_t priority = 0, std::uint16_t sport = 1, std::uint16_t dport = 2) {
    std::array<std::byte, header_size> header{};
    std::memcpy(header.data(), &cookie, sizeof cookie);
    auto region = cores[from]->validate(data.data(), data.size());
    if (!region) return region.status();
    send_regions.push_back(*region);
    SendArgs a;
    a.cookie = cookie;
    a.peer = to;
    a.priority = priority;
    a.source_port = sport;
    a.destination_port = dport;
    a.upper = wire::Upper::port;
    a.header = header;
    a.region = &send_regions.back();
    a.length = data.size();
    return cores[from]->send(a);
  }

  Status status = Status::ok;
  std::vector<std::unique_ptr<Core>> cores;
  std::vector<std::unique_ptr<Recorder>> clients;
  std::deque<Region> send_regions;

 private:
  config::ScopedSet drivers_;
};

inline std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7) & 0xff);
  return v;
}

}  // namespace pier::core::test
