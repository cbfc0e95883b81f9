// pier ofi: connections reported by Context::incoming(). A hello names its
// sender by the url it carries; whatever a peer puts there is hostile until
// checked, and only a hello that names its own sender, for our provider, is
// ever reported. Parked hellos are bounded and time out, and a sleeper
// armed by wait_arm() wakes for one.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "base/config.hpp"
#include "drivers/ofi/codec.hpp"
#include "drivers/ofi/context.hpp"
#include "ofi_helpers.hpp"

namespace pier::drivers::ofi::test {
namespace {

driver::Hints on_demand() {
  driver::Hints h;
  h.on_demand = true;
  return h;
}

class OfiIncoming : public ::testing::TestWithParam<std::string> {};

std::uint64_t context_of(const Node& n) {
  return decode_url(n.url).value().context_id;
}

/// A hello from x's endpoint (its peer 0, y) on the large track, naming
/// `sender` and carrying `url` (kept in place by the caller until the end).
Status forge_hello(Node& x, const Node& y, std::uint64_t sender, std::span<const std::byte> url) {
  auto& cx = dynamic_cast<OfiContext&>(*x.ctx);
  Control h;
  h.type = ControlType::hello;
  h.track = Track::large;
  h.sender_instance = 77;
  h.sender_context = sender;
  h.target_context = context_of(y);
  h.url = url;
  const auto deadline = soon();
  for (;;) {
    Status s = Status::no_resource;
    {
      std::lock_guard lock(cx.mutex());
      s = cx.send_control_bytes(0, encode_control(h), url, 0);
    }
    if (s != Status::no_resource || Clock::now() > deadline) return s;
    driver::Instance* ready = nullptr;
    (void)x.ctx->probe_any(&ready);
  }
}

/// How many urls y reports while both contexts are polled for `window`.
int reports_within(Node& x, Node& y, std::chrono::milliseconds window,
                   std::vector<std::vector<std::byte>>* urls = nullptr) {
  int n = 0;
  std::vector<std::byte> url;
  driver::Instance* ready = nullptr;
  const auto until = Clock::now() + window;
  while (Clock::now() < until) {
    (void)x.ctx->probe_any(&ready);
    if (y.ctx->incoming(url) == Status::ok) {
      ++n;
      if (urls != nullptr) urls->push_back(url);
    }
  }
  return n;
}

TEST_P(OfiIncoming, AHelloWhoseUrlIsNotItsSendersIsNeverReported) {
  std::vector<std::vector<std::byte>> forged;  // outlives the sends
  Node x, y;
  const Status st = make_node(GetParam(), x, on_demand());
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y, on_demand()), Status::ok);
  ASSERT_TRUE(x.props.caps.incoming);
  Link l;  // x learns y's address (its peer 0)
  ASSERT_EQ(connect(x, y, Track::small, l), Status::ok);
  const Url real = decode_url(x.url).value();
  auto changed = [&](auto edit) {
    Url u = real;
    edit(u);
    return encode_url(u).value();
  };
  forged.push_back(changed([](Url& u) { u.context_id ^= 2; }));     // another context's
  forged.push_back(changed([](Url& u) { u.provider_hash ^= 1; }));  // another provider's
  forged.push_back(x.url);
  forged.back()[0] = std::byte{'X'};  // not a url
  forged.push_back(x.url);
  forged.back()[5] = static_cast<std::byte>(real.name.size() + 1);  // its length lies
  forged.push_back(x.url);
  forged.back().resize(x.url.size() + 400, std::byte{0x41});  // past what a receive holds
  for (const auto& url : forged) ASSERT_EQ(forge_hello(x, y, real.context_id, url), Status::ok);
  EXPECT_EQ(reports_within(x, y, std::chrono::milliseconds(300)), 0);
  // The same with the true url is reported, exactly as x's init() gave it.
  forged.push_back(x.url);
  ASSERT_EQ(forge_hello(x, y, real.context_id, forged.back()), Status::ok);
  std::vector<std::vector<std::byte>> urls;
  EXPECT_EQ(reports_within(x, y, std::chrono::milliseconds(300), &urls), 1);
  if (!urls.empty()) {
    EXPECT_EQ(urls[0], x.url);
  }
  // And the link still works.
  std::vector<std::byte> src(64), dst(64);
  fill(src, 3);
  ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
  Packet s, r;
  s.set_iovec(&siov, 1);
  r.set_iovec(&riov, 1);
  Status ss = l.a->send_post(s), rs = l.b->recv_post(r);
  ASSERT_EQ(finish(*l.a, s, &ss, *l.b, r, &rs), Status::ok);
  EXPECT_EQ(rs, Status::ok);
  EXPECT_TRUE(same(dst, 3));
  l = {};
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

std::size_t open_descriptors() {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
    n += e.exists() ? 1 : 0;
  return n;
}

TEST_P(OfiIncoming, ParkedHellosAreBoundedAndThoseReportedMakeRoomForNewOnes) {
  std::vector<std::vector<std::byte>> urls;  // outlive the sends
  Node x, y;
  const Status st = make_node(GetParam(), x, on_demand());
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y, on_demand()), Status::ok);
  Link l;
  ASSERT_EQ(connect(x, y, Track::small, l), Status::ok);
  // As many peers as there is room for, then more: each its own context
  // id at x's address.
  const std::size_t extra = 40;
  const Url real = decode_url(x.url).value();
  for (std::size_t i = 0; i < min_parked + extra; ++i) {
    Url u = real;
    u.context_id = real.context_id + 2 * (i + 1);
    urls.push_back(encode_url(u).value());
  }
  for (std::size_t i = 0; i < min_parked; ++i)
    ASSERT_EQ(forge_hello(x, y, decode_url(urls[i]).value().context_id, urls[i]), Status::ok) << i;
  std::vector<std::vector<std::byte>> reported;
  EXPECT_EQ(reports_within(x, y, std::chrono::milliseconds(1000), &reported),
            static_cast<int>(min_parked));
  for (std::size_t i = 0; i < reported.size(); ++i)
    EXPECT_TRUE(std::find(urls.begin(), urls.end(), reported[i]) != urls.end()) << i;
  // The list is full of hellos the "core" passed over: each newcomer takes
  // the place of the oldest (refused), so a flood of forged hellos cannot
  // keep a real connector out. The refusals go to the urls the hellos
  // named: no process is watched for them (before, each opened a pidfd on
  // the pid the url named) and x drops them (they name contexts it is not).
  const std::size_t fds = open_descriptors();
  for (std::size_t i = min_parked; i < urls.size(); ++i)
    ASSERT_EQ(forge_hello(x, y, decode_url(urls[i]).value().context_id, urls[i]), Status::ok) << i;
  reported.clear();
  EXPECT_EQ(reports_within(x, y, std::chrono::milliseconds(1000), &reported),
            static_cast<int>(extra));
  for (std::size_t i = 0; i < reported.size(); ++i)
    EXPECT_TRUE(std::find(urls.begin() + min_parked, urls.end(), reported[i]) != urls.end()) << i;
  EXPECT_LE(open_descriptors(), fds + 2);
  l = {};
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

TEST_P(OfiIncoming, AHelloRefusedUnderAnotherContextsNameDoesNotRedirectALaterConnection) {
  // z's context id, with x's address: a forged hello (anyone may claim any
  // id), parked at y, passed over and refused there. y's later connection
  // to z, from z's true url, must reach z, not x.
  config::ScopedSet park("OFI_PARK_MS", "50");
  std::vector<std::byte> forged;
  Node x, y, z;
  const Status st = make_node(GetParam(), x, on_demand());
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y, on_demand()), Status::ok);
  ASSERT_EQ(make_node(GetParam(), z, on_demand()), Status::ok);
  Link xy;
  ASSERT_EQ(connect(x, y, Track::small, xy), Status::ok);
  Url u = decode_url(x.url).value();
  u.context_id = context_of(z);
  forged = encode_url(u).value();
  ASSERT_EQ(forge_hello(x, y, u.context_id, forged), Status::ok);
  std::vector<std::vector<std::byte>> reported;
  EXPECT_EQ(reports_within(x, y, std::chrono::milliseconds(300), &reported), 1);
  (void)reports_within(x, y, std::chrono::milliseconds(200));  // expired and refused
  Link yz;
  EXPECT_EQ(connect(y, z, Track::large, yz), Status::ok);
  if (yz.a && yz.b) {
    std::vector<std::byte> src(64), dst(64);
    fill(src, 5);
    ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
    Packet s, r;
    s.set_iovec(&siov, 1);
    r.set_iovec(&riov, 1);
    Status ss = yz.a->send_post(s), rs = yz.b->recv_post(r);
    ASSERT_EQ(finish(*yz.a, s, &ss, *yz.b, r, &rs), Status::ok);
    EXPECT_EQ(rs, Status::ok);
    EXPECT_TRUE(same(dst, 5));
  }
  yz = {};
  xy = {};
  EXPECT_EQ(z.ctx->close(), Status::ok);
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

/// A listening socket at `name`, an endpoint name over tcp (its sockaddr):
/// a send there shows as a connection; -1 when `name` is no such address
/// or it cannot be taken.
int listen_at(std::span<const std::byte> name) {
  sockaddr_storage sa{};
  if (name.size() < sizeof(sa.ss_family) || name.size() > sizeof(sa)) return -1;
  std::memcpy(&sa, name.data(), name.size());
  if (sa.ss_family != AF_INET && sa.ss_family != AF_INET6) return -1;
  const int fd = ::socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), static_cast<socklen_t>(name.size())) !=
          0 ||
      ::listen(fd, 8) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST_P(OfiIncoming, AHelloNamingAClosedContextsEndpointUnderAMadeUpIdSendsNothingThere) {
  // w, a context of this process, closed; a forged hello at y carries w's
  // url under an id w never had. The record of closed contexts knew ids
  // only: the refusal went to w's endpoint, which crashed libfabric 1.17's
  // shm (SIGSEGV). Over tcp a socket put on w's port sees whatever is sent
  // there.
  config::ScopedSet park("OFI_PARK_MS", "50");
  std::vector<std::byte> forged;
  Node x, y, w;
  const Status st = make_node(GetParam(), x, on_demand());
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y, on_demand()), Status::ok);
  ASSERT_EQ(make_node(GetParam(), w), Status::ok);
  Link xy;  // x learns y's address (its peer 0)
  ASSERT_EQ(connect(x, y, Track::small, xy), Status::ok);
  Url u = decode_url(w.url).value();
  ASSERT_EQ(w.ctx->close(), Status::ok);
  u.context_id = context_of(w) ^ 0x5a5a0000;  // made up
  forged = encode_url(u).value();
  int watch = -1;
  if (GetParam() == "tcp") {
    watch = listen_at(u.name);
    ASSERT_GE(watch, 0) << "cannot listen at w's address (" << u.name.size() << " bytes)";
  }
  ASSERT_EQ(forge_hello(x, y, u.context_id, forged), Status::ok);
  // Its form is right: reported, then passed over, expired and refused.
  EXPECT_EQ(reports_within(x, y, std::chrono::milliseconds(300)), 1);
  (void)reports_within(x, y, std::chrono::milliseconds(300));
  if (watch >= 0) {
    pollfd pfd{watch, POLLIN, 0};
    EXPECT_EQ(::poll(&pfd, 1, 200), 0) << "y sent to the endpoint of w, a closed context";
    ::close(watch);
  }
  // And y still works.
  std::vector<std::byte> src(64), dst(64);
  fill(src, 4);
  ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
  Packet s, r;
  s.set_iovec(&siov, 1);
  r.set_iovec(&riov, 1);
  Status ss = xy.a->send_post(s), rs = xy.b->recv_post(r);
  ASSERT_EQ(finish(*xy.a, s, &ss, *xy.b, r, &rs), Status::ok);
  EXPECT_EQ(rs, Status::ok);
  EXPECT_TRUE(same(dst, 4));
  xy = {};
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

/// A tcp port with `n - 1` free ports after it, or 0.
int free_ports(int n) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len = sizeof(sa);
    const bool got = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0;
    if (fd >= 0) ::close(fd);
    const int first = got ? ntohs(sa.sin_port) : 0;
    if (first == 0 || first + n > 65535) continue;
    bool all = true;
    for (int i = 1; i < n && all; ++i) {
      sockaddr_in next{};
      next.sin_family = AF_INET;
      next.sin_port = htons(static_cast<std::uint16_t>(first + i));
      const int f = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      all = f >= 0 && ::bind(f, reinterpret_cast<sockaddr*>(&next), sizeof(next)) == 0;
      if (f >= 0) ::close(f);
    }
    if (all) return first;
  }
  return 0;
}

TEST_P(OfiIncoming, ALaterContextGivenAClosedContextsNameIsReachable) {
  // A closed context's name is refused whatever id comes with it, but a
  // name can be given again: with tcp's listening ports limited to three,
  // z must take the port w closed while x and y hold the other two. z's
  // url (its own id, w's name) must still reach z. shm names endpoints by
  // a counter that never repeats in a process.
  if (GetParam() != "tcp")
    GTEST_SKIP() << "ofi:" << GetParam() << " never gives a name twice in a process";
  const int port = free_ports(3);
  ASSERT_NE(port, 0) << "no three free tcp ports in a row";
  // libfabric reads the range once, at its first use: in a fresh process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto run = [port]() -> int {
    ::setenv("FI_TCP_PORT_LOW_RANGE", std::to_string(port).c_str(), 1);
    ::setenv("FI_TCP_PORT_HIGH_RANGE", std::to_string(port + 2).c_str(), 1);
    Node x, y, w, z;
    const Status st = make_node("tcp", x, on_demand());
    if (st == Status::unsupported) return 0;  // as the parent's skip would
    if (st != Status::ok || make_node("tcp", y, on_demand()) != Status::ok ||
        make_node("tcp", w) != Status::ok)
      return 2;
    const Url closed = decode_url(w.url).value();
    if (w.ctx->close() != Status::ok || make_node("tcp", z) != Status::ok) return 3;
    const Url later = decode_url(z.url).value();
    if (later.name != closed.name) return 4;  // no collision: the test proves nothing
    Link yz;
    if (connect(y, z, Track::large, yz) != Status::ok) return 5;
    std::vector<std::byte> src(64), dst(64);
    fill(src, 6);
    ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
    Packet s, r;
    s.set_iovec(&siov, 1);
    r.set_iovec(&riov, 1);
    Status ss = yz.a->send_post(s), rs = yz.b->recv_post(r);
    if (finish(*yz.a, s, &ss, *yz.b, r, &rs) != Status::ok || rs != Status::ok || !same(dst, 6))
      return 6;
    yz = {};
    if (z.ctx->close() != Status::ok || y.ctx->close() != Status::ok ||
        x.ctx->close() != Status::ok)
      return 7;
    return 0;
  };
  // 2: a context did not open; 3: w did not close or z not open; 4: z got
  // another name; 5: y could not connect to z; 6: the packet did not
  // arrive; 7: a close failed.
  EXPECT_EXIT(std::_Exit(run()), ::testing::ExitedWithCode(0), "");
}

TEST_P(OfiIncoming, WhatAContextSentBeforeItClosedArrivesBeforeTheClose) {
  // Every packet owes a credit, which goes out while the packet is read:
  // the credit for x's last packet finds x closed already. That must stop
  // the credit, not declare x dead before its packet and bye are read
  // (the receive for that packet then ended broken).
  config::ScopedSet credits("OFI_CREDITS", "2");
  Node x, y;
  const Status st = make_node(GetParam(), x);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y), Status::ok);
  Link l;
  ASSERT_EQ(connect(x, y, Track::small, l), Status::ok);
  std::vector<std::byte> src(64), dst(64);
  fill(src, 9);
  ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
  Packet s, r;
  s.set_iovec(&siov, 1);
  r.set_iovec(&riov, 1);
  ASSERT_TRUE(is_success(l.b->recv_post(r)));
  Status ss = l.a->send_post(s);
  const auto deadline = soon();
  while (ss == Status::in_progress && Clock::now() < deadline) ss = l.a->send_poll(s);
  ASSERT_EQ(ss, Status::ok);
  (void)l.a->disconnect();
  l.a.reset();
  ASSERT_EQ(x.ctx->close(), Status::ok);
  Status rs = Status::in_progress;
  while (rs == Status::in_progress && Clock::now() < deadline) rs = l.b->recv_poll(r);
  EXPECT_EQ(rs, Status::ok);
  EXPECT_TRUE(same(dst, 9));
  Packet after;
  ::iovec aiov{dst.data(), dst.size()};
  after.set_iovec(&aiov, 1);
  Status as = l.b->recv_post(after);
  while (as == Status::in_progress && Clock::now() < deadline) as = l.b->recv_poll(after);
  EXPECT_EQ(as, Status::closed);
  l = {};
  EXPECT_EQ(y.ctx->close(), Status::ok);
}

TEST_P(OfiIncoming, ADataSendToAContextOfThisProcessThatClosedIsRefused) {
  // Control messages to a context of this process that closed were held
  // back (a send to its endpoint crashed libfabric 1.17's shm), but data
  // sends went out until the periodic check declared the peer dead. Now the
  // send is refused at once, before anything reaches the provider.
  Node x, y;
  const Status st = make_node(GetParam(), x);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y), Status::ok);
  Link l, large;
  ASSERT_EQ(connect(x, y, Track::small, l), Status::ok);
  ASSERT_EQ(connect(x, y, Track::large, large), Status::ok);
  (void)l.a->disconnect();
  l.a.reset();
  large.a.reset();  // without disconnect(): y has not read its bye yet
  ASSERT_EQ(x.ctx->close(), Status::ok);
  // 64 bytes go by fi_tinject; 4 KiB (above any inject size) by an op that
  // send_post() hands to post_op(), which no longer looks at the peer a
  // second time: send_post()'s own look must refuse both.
  for (const std::size_t size : {std::size_t{64}, std::size_t{4096}}) {
    std::vector<std::byte> src(size);
    fill(src, 3);
    ::iovec siov{src.data(), src.size()};
    Packet s;
    s.set_iovec(&siov, 1);
    const Status sent = l.b->send_post(s);
    EXPECT_TRUE(sent == Status::broken || sent == Status::closed)
        << size << ": " << to_string(sent);
    Packet t;
    t.set_iovec(&siov, 1);
    const Status on_large = large.b->send_post(t);
    EXPECT_TRUE(on_large == Status::broken || on_large == Status::closed)
        << size << " on the large track: " << to_string(on_large);
  }
  l = {};
  large = {};
  EXPECT_EQ(y.ctx->close(), Status::ok);
}

TEST_P(OfiIncoming, AHelloNobodyTakesIsRefusedAfterTheParkLimit) {
  // Without on demand too: the peer never opens an instance for us.
  config::ScopedSet park("OFI_PARK_MS", "100");
  Node x, y;
  const Status st = make_node(GetParam(), x);
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y), Status::ok);
  auto a = x.ctx->open_instance(Track::small);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(is_success((*a)->connect_async(y.url)));
  const auto start = Clock::now();
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  Status got = Status::timeout;
  driver::Instance* ready = nullptr;
  while (Clock::now() < deadline) {
    got = (*a)->connect_wait(Clock::now() + std::chrono::milliseconds(5));
    if (got != Status::timeout && got != Status::in_progress) break;
    (void)y.ctx->probe_any(&ready);
  }
  EXPECT_EQ(got, Status::broken);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(80)) << "refused before the limit";
  a->reset();
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

TEST_P(OfiIncoming, AHelloEndsASleepArmedByWaitArm) {
  Node x, y;
  const Status st = make_node(GetParam(), x, on_demand());
  if (st == Status::unsupported) GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
  ASSERT_EQ(st, Status::ok);
  ASSERT_EQ(make_node(GetParam(), y, on_demand()), Status::ok);
  std::vector<::pollfd> fds;
  const Status armed = y.ctx->wait_arm(fds);
  (void)y.ctx->wait_disarm();
  if (armed == Status::unsupported)
    GTEST_SKIP() << "ofi:" << GetParam() << " gives no wait descriptor";
  ASSERT_EQ(armed, Status::ok);
  auto a = x.ctx->open_instance(Track::small);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(is_success((*a)->connect_async(y.url)));
  // x keeps going on its own (its hello, and over tcp;ofi_rxm the
  // connection under it, need its progress) while y sleeps on its
  // descriptors. Each sleep must end by a descriptor, long before its
  // 3 s, until y says a connection waits: over rxm the connection's own
  // set-up wakes y first.
  std::atomic<bool> stop{false};
  std::thread driver([&] {
    while (!stop.load()) (void)(*a)->connect_wait(Clock::now() + std::chrono::milliseconds(1));
  });
  int sleeps = 0, slept_out = 0;
  Status reported = Status::in_progress;
  std::vector<std::byte> url;
  const auto deadline = soon();
  while (Clock::now() < deadline && slept_out == 0) {
    fds.clear();
    if (y.ctx->wait_arm(fds) == Status::ok) {
      ++sleeps;
      if (::poll(fds.data(), fds.size(), 3000) == 0) ++slept_out;
    }
    (void)y.ctx->wait_disarm();
    // Woken (or told not to sleep): whatever came, a core asks now.
    reported = y.ctx->incoming(url);
    if (reported != Status::in_progress) break;
  }
  stop = true;
  driver.join();
  EXPECT_EQ(slept_out, 0) << "a sleep the hello should have ended ran out, after " << sleeps;
  EXPECT_EQ(reported, Status::ok);
  EXPECT_EQ(url, x.url);

  // A hello some other progress read (a probe, as a core polls its
  // rails) left the descriptor quiet: arming must not let the caller sleep
  // on it until incoming() took it.
  auto b = x.ctx->open_instance(Track::large);
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(is_success((*b)->connect_async(y.url)));
  stop = false;
  std::thread again([&] {
    while (!stop.load()) (void)(*b)->connect_wait(Clock::now() + std::chrono::milliseconds(1));
  });
  driver::Instance* ready = nullptr;
  const auto read_for = Clock::now() + std::chrono::milliseconds(300);
  while (Clock::now() < read_for) (void)y.ctx->probe_any(&ready);
  stop = true;
  again.join();
  fds.clear();
  EXPECT_EQ(y.ctx->wait_arm(fds), Status::in_progress);
  (void)y.ctx->wait_disarm();
  EXPECT_EQ(y.ctx->incoming(url), Status::ok);
  EXPECT_EQ(url, x.url);
  b->reset();
  a->reset();
  EXPECT_EQ(y.ctx->close(), Status::ok);
  EXPECT_EQ(x.ctx->close(), Status::ok);
}

INSTANTIATE_TEST_SUITE_P(Providers, OfiIncoming, ::testing::ValuesIn(providers()),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace pier::drivers::ofi::test
