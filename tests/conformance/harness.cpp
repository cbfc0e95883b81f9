// pier conformance: harness implementation.
#include "harness.hpp"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace pier::conformance {

std::vector<std::string> driver_specs() {
  std::vector<std::string> plain;
  bool have_fault = false;
  for (const auto& entry : pier::driver::builtin_drivers()) {
    if (entry.name == "fault")
      have_fault = true;
    else
      plain.emplace_back(entry.name);
  }
  std::vector<std::string> specs = plain;
  // The fault wrapper with injection off must be indistinguishable from the
  // driver it wraps.
  if (have_fault)
    for (const auto& name : plain) specs.push_back("fault:" + name);
  return specs;
}

std::string cell_name(std::string_view spec) {
  std::string name(spec);
  std::replace(name.begin(), name.end(), ':', '_');
  return name;
}

bool in_process_only(std::string_view spec) {
  const std::size_t colon = spec.rfind(':');
  const std::string_view base = colon == std::string_view::npos ? spec : spec.substr(colon + 1);
  return base == "self";
}

Status make_node(std::string_view spec, Node& node, const pier::driver::Hints& hints) {
  auto ctx = pier::driver::make_context(spec);
  if (!ctx) return ctx.status();
  node.ctx = std::move(*ctx);
  auto props = node.ctx->properties(hints);
  if (!props) return props.status();
  node.props = *props;
  auto url = node.ctx->init();
  if (!url) return url.status();
  node.url = std::move(*url);
  return Status::ok;
}

Status finish_connect(std::span<Instance* const> instances, Deadline deadline) {
  std::vector<bool> done(instances.size(), false);
  std::size_t left = instances.size();
  while (left > 0) {
    for (std::size_t i = 0; i < instances.size(); ++i) {
      if (done[i]) continue;
      const Status s = instances[i]->connect_wait(deadline_after(std::chrono::milliseconds(5)));
      if (s == Status::ok || s == Status::unsupported) {
        done[i] = true;
        --left;
      } else if (s != Status::in_progress && s != Status::timeout) {
        return s;
      }
    }
    if (left > 0 && Clock::now() > deadline) return Status::timeout;
  }
  return Status::ok;
}

Status connect_link(Node& x, Node& y, Track track, Link& link) {
  auto a = x.ctx->open_instance(track);
  if (!a) return a.status();
  auto b = y.ctx->open_instance(track);
  if (!b) return b.status();
  link.a = std::move(*a);
  link.b = std::move(*b);
  if (Status s = link.a->connect_async(y.url); s != Status::ok && s != Status::in_progress)
    return s;
  if (Status s = link.b->connect_async(x.url); s != Status::ok && s != Status::in_progress)
    return s;
  Instance* both[] = {link.a.get(), link.b.get()};
  return finish_connect(both, default_deadline());
}

Status drive(const std::function<bool()>& step, Deadline deadline) {
  for (;;) {
    if (step()) return Status::ok;
    if (Clock::now() > deadline) return Status::timeout;
    std::this_thread::yield();
  }
}

Status finish_send(Instance& tx, Packet& pkt, Deadline deadline) {
  Status s = Status::in_progress;
  const Status d = drive(
      [&] {
        s = tx.send_poll(pkt);
        return s != Status::in_progress;
      },
      deadline);
  return d == Status::ok ? s : d;
}

Status finish_recv(Instance& rx, Packet& pkt, Deadline deadline) {
  Status s = Status::in_progress;
  const Status d = drive(
      [&] {
        s = rx.recv_poll(pkt);
        return s != Status::in_progress;
      },
      deadline);
  return d == Status::ok ? s : d;
}

Status finish_both(Instance& tx, Packet& s, Status* send_status, Instance& rx, Packet& r,
                   Deadline deadline) {
  Status ss = *send_status;
  Status rs = Status::in_progress;
  const Status d = drive(
      [&] {
        if (ss == Status::in_progress) ss = tx.send_poll(s);
        if (rs == Status::in_progress) rs = rx.recv_poll(r);
        return ss != Status::in_progress && rs != Status::in_progress;
      },
      deadline);
  *send_status = ss;
  return d == Status::ok ? rs : d;
}

Status recv_bytes(Instance& rx, const Caps& caps, std::span<std::byte> dst, std::size_t* got,
                  Deadline deadline) {
  *got = 0;
  Packet pkt;
  if (caps.recv_post) {
    ::iovec iov{dst.data(), dst.size()};
    pkt.set_iovec(&iov, 1);
    Status s = rx.recv_post(pkt);
    if (s == Status::in_progress) s = finish_recv(rx, pkt, deadline);
    *got = pkt.length;
    return s;
  }
  Status s = finish_recv(rx, pkt, deadline);
  if (s != Status::ok) return s;
  const std::size_t n = std::min(pkt.length, dst.size());
  if (n > 0) std::memcpy(dst.data(), pkt.buf, n);
  *got = n;
  const bool truncated = pkt.length > dst.size();
  if (Status r = rx.recv_buf_release(pkt); r != Status::ok) return r;
  return truncated ? Status::truncated : Status::ok;
}

Status round_trip(Instance& tx, Instance& rx, const Caps& caps, std::span<const std::byte> src,
                  std::span<std::byte> dst, std::size_t* got) {
  const Deadline deadline = default_deadline();
  ::iovec siov{const_cast<std::byte*>(src.data()), src.size()};
  Packet s;
  s.set_iovec(&siov, 1);
  if (!caps.recv_post) {
    Status ss = Status::no_resource;
    const Status d = drive(
        [&] {
          ss = tx.send_post(s);
          return ss != Status::no_resource;
        },
        deadline);
    if (d != Status::ok) return d;
    if (ss == Status::in_progress) ss = finish_send(tx, s, deadline);
    if (ss != Status::ok) return ss;
    return recv_bytes(rx, caps, dst, got, deadline);
  }
  ::iovec riov{dst.data(), dst.size()};
  Packet r;
  r.set_iovec(&riov, 1);
  Status rs = rx.recv_post(r);
  if (rs != Status::in_progress && rs != Status::ok && rs != Status::truncated) return rs;
  s.rdv_data = r.rdv_data;
  s.rdv_len = r.rdv_len;
  Status ss = Status::no_resource;
  const Status d = drive(
      [&] {
        ss = tx.send_post(s);
        return ss != Status::no_resource;
      },
      deadline);
  if (d != Status::ok) return d;
  if (ss != Status::ok && ss != Status::in_progress) return ss;
  if (rs == Status::in_progress) {
    rs = finish_both(tx, s, &ss, rx, r, deadline);
  } else if (ss == Status::in_progress) {
    ss = finish_send(tx, s, deadline);
  }
  *got = r.length;
  if (ss != Status::ok) return ss;
  return rs;
}

std::byte pattern_byte(std::uint64_t seed, std::size_t i) {
  const std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + i * 131 + (i >> 9) * 7;
  return static_cast<std::byte>((x ^ (x >> 29)) & 0xff);
}

void fill_pattern(std::span<std::byte> out, std::uint64_t seed) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = pattern_byte(seed, i);
}

std::size_t check_pattern(std::span<const std::byte> in, std::uint64_t seed) {
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i] != pattern_byte(seed, i)) return i;
  return in.size();
}

void DriverTest::SetUp() {
  if (spec_.starts_with("fault:")) {
    no_faults_ = std::make_unique<pier::config::ScopedSet>("FAULT_PLAN", "");
    ASSERT_EQ(no_faults_->status(), Status::ok) << "cannot turn fault injection off";
  }
  auto ctx = pier::driver::make_context(spec_);
  ASSERT_TRUE(ctx.has_value()) << "make_context(" << spec_
                               << ") failed: " << pier::to_string(ctx.status());
  const std::string why = (*ctx)->unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << spec_ << " cannot run here: " << why;
}

bool register_case(const char* name, const char* file, int line, CaseFactory make) {
  for (const std::string& spec : driver_specs()) {
    const std::string suite = "Conformance/" + cell_name(spec);
    ::testing::RegisterTest(suite.c_str(), name, nullptr, spec.c_str(), file, line,
                            [make, spec]() -> DriverTest* {
                              DriverTest* t = make();
                              t->set_spec(spec);
                              return t;
                            });
  }
  return true;
}

}  // namespace pier::conformance
