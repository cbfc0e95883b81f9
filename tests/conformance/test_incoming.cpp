// pier conformance: connections opened on demand (Hints::on_demand,
// Caps::incoming). One side opens an instance and connects; the other has no
// instance for it and learns of the peer through Context::incoming(), then
// opens its own. Whichever of the two the urls make the connector, the side
// that starts must succeed: an acceptor asks its peer to call back.
#include <algorithm>
#include <array>

#include "base/config.hpp"
#include "harness.hpp"

namespace pier::conformance {
namespace {

using namespace std::chrono_literals;

pier::driver::Hints on_demand() {
  pier::driver::Hints h;
  h.on_demand = true;
  return h;
}

/// `from` connects `track` to `to`, which has no instance yet: `to` must
/// report `from`'s url once, then connect back; a packet crosses each way.
void connect_on_demand(Node& from, Node& to, Track track) {
  auto a = from.ctx->open_instance(track);
  ASSERT_TRUE(a.has_value()) << to_string(a.status());
  const Status started = (*a)->connect_async(to.url);
  ASSERT_TRUE(is_success(started)) << to_string(started);
  std::vector<std::byte> url;
  Status got = Status::in_progress;
  ASSERT_EQ(drive(
                [&] {
                  // The starting side may need its own progress to send its
                  // hello or its call back.
                  (void)(*a)->connect_wait(Clock::now());
                  got = to.ctx->incoming(url);
                  return got != Status::in_progress;
                },
                default_deadline()),
            Status::ok)
      << "the peer never reported the connection";
  ASSERT_EQ(got, Status::ok);
  EXPECT_EQ(url, from.url);
  auto b = to.ctx->open_instance(track);
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(is_success((*b)->connect_async(url)));
  std::array<Instance*, 2> both{a->get(), b->get()};
  ASSERT_EQ(finish_connect(both, default_deadline()), Status::ok);
  // Reported once: nothing more waits.
  EXPECT_EQ(to.ctx->incoming(url), Status::in_progress);
  EXPECT_EQ(from.ctx->incoming(url), Status::in_progress);

  std::array<std::byte, 64> out{}, in{};
  fill_pattern(out, 7);
  std::size_t n = 0;
  ASSERT_EQ(round_trip(**a, **b, from.props.caps, out, in, &n), Status::ok);
  EXPECT_EQ(n, out.size());
  EXPECT_EQ(check_pattern(in, 7), in.size());
  fill_pattern(out, 8);
  ASSERT_EQ(round_trip(**b, **a, to.props.caps, out, in, &n), Status::ok);
  EXPECT_EQ(check_pattern(in, 8), in.size());
}

CONFORMANCE_TEST(IncomingOnDemand) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x, on_demand()), Status::ok);
  ASSERT_EQ(make_node(spec(), y, on_demand()), Status::ok);
  std::vector<std::byte> url;
  if (!x.props.caps.incoming) {
    EXPECT_EQ(x.ctx->incoming(url), Status::unsupported);
    GTEST_SKIP() << spec() << " does not report incoming connections";
  }
  EXPECT_EQ(x.ctx->incoming(url), Status::in_progress);
  // One track started by each side: one of the two is the urls' acceptor,
  // which must ask for a call back.
  connect_on_demand(x, y, Track::small);
  connect_on_demand(y, x, Track::large);
}

CONFORMANCE_TEST(IncomingToAPeerThatIsGoneFails) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x, on_demand()), Status::ok);
  ASSERT_EQ(make_node(spec(), y, on_demand()), Status::ok);
  if (!x.props.caps.incoming) GTEST_SKIP() << spec() << " does not report incoming connections";
  ASSERT_EQ(y.ctx->close(), Status::ok);
  auto a = x.ctx->open_instance(Track::small);
  ASSERT_TRUE(a.has_value());
  Status st = (*a)->connect_async(y.url);
  if (is_success(st)) {
    // Whichever role the urls give us, the answer is final and quick: a
    // connector is refused, an acceptor's call back is refused.
    const Deadline deadline = default_deadline();
    ASSERT_EQ(drive(
                  [&] {
                    st = (*a)->connect_wait(Clock::now() + 5ms);
                    return st != Status::in_progress && st != Status::timeout;
                  },
                  deadline),
              Status::ok)
        << "connecting to a closed peer never ended";
  }
  EXPECT_FALSE(is_success(st));
  EXPECT_NE(st, Status::ok) << to_string(st);
}

/// How often `to` reports `from` within `window` while `from` connects
/// `track` and `to` opens nothing (as if each report were lost); then `to`
/// connects back and a packet must cross (-1 when anything fails).
int reports_while_ignored(Node& from, Node& to, Track track, std::chrono::milliseconds window) {
  auto a = from.ctx->open_instance(track);
  if (!a) return -1;
  if (!is_success((*a)->connect_async(to.url))) return -1;
  std::vector<std::byte> url;
  int reports = 0;
  (void)drive(
      [&] {
        (void)(*a)->connect_wait(Clock::now());
        if (to.ctx->incoming(url) == Status::ok && url == from.url) ++reports;
        return false;
      },
      deadline_after(window));
  if (reports == 0) return 0;
  auto b = to.ctx->open_instance(track);
  if (!b || !is_success((*b)->connect_async(from.url))) return -1;
  std::array<Instance*, 2> both{a->get(), b->get()};
  if (finish_connect(both, default_deadline()) != Status::ok) return -1;
  std::array<std::byte, 64> out{}, in{};
  fill_pattern(out, 9);
  std::size_t n = 0;
  if (round_trip(**a, **b, from.props.caps, out, in, &n) != Status::ok) return -1;
  return check_pattern(in, 9) == in.size() ? reports : -1;
}

CONFORMANCE_TEST(IncomingCallBackIsRepeatedUntilAnswered) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x, on_demand()), Status::ok);
  ASSERT_EQ(make_node(spec(), y, on_demand()), Status::ok);
  if (!x.props.caps.incoming) GTEST_SKIP() << spec() << " does not report incoming connections";
  // The urls make one of the pair the acceptor; the direction that starts
  // from it asks for call backs, every 100 ms while nobody answers (a busy
  // peer may drop one), so a peer that ignored the first hears again. The
  // other direction's parked connection is reported once.
  const int one = reports_while_ignored(x, y, Track::small, 1000ms);
  const int two = reports_while_ignored(y, x, Track::large, 1000ms);
  ASSERT_GE(one, 1) << "not reported, or the late connection failed";
  ASSERT_GE(two, 1) << "not reported, or the late connection failed";
  EXPECT_EQ(std::min(one, two), 1) << "a parked connection is reported once";
  EXPECT_GE(std::max(one, two), 2) << "an unanswered call back was not repeated";
}

/// How a connection that its peer reports but never takes ended.
struct NeverTaken {
  Status ended = Status::timeout;  ///< timeout: still waiting at the deadline
  bool reported = false;           ///< the peer's incoming() named us
  Clock::duration after_report{};  ///< from the first report to the end
};

/// `from` connects to `to`, which reports the connection (incoming()) but
/// never takes it. `from` fails once `to` closed the parked connection, or
/// times out when `from` is the urls' acceptor (it waits for a call back
/// that never comes, which its user's own deadline ends).
NeverTaken connect_to_a_peer_that_never_takes(Node& from, Node& to, Track track) {
  NeverTaken out;
  auto a = from.ctx->open_instance(track);
  if (!a) return {a.status()};
  Status st = (*a)->connect_async(to.url);
  if (!is_success(st)) return {st};
  std::vector<std::byte> url;
  Clock::time_point reported_at{};
  // Without buffer receives the close shows on a posted one.
  std::array<std::byte, 64> buf{};
  ::iovec iov{buf.data(), buf.size()};
  pier::driver::Packet posted;
  bool is_posted = false;
  (void)drive(
      [&] {
        if (to.ctx->incoming(url) == Status::ok && url == from.url && !out.reported) {
          out.reported = true;
          reported_at = Clock::now();
        }
        st = (*a)->connect_wait(Clock::now());
        if ((st == Status::ok || st == Status::unsupported) && from.props.caps.recv_buf) {
          // Connected as far as this side knows: the close shows on a poll.
          pier::driver::Packet p;
          st = (*a)->recv_poll(p);
          if (st == Status::ok) (void)(*a)->recv_buf_release(p);
        } else if (st == Status::ok || st == Status::unsupported) {
          if (!is_posted) {
            posted.set_iovec(&iov, 1);
            st = (*a)->recv_post(posted);
            is_posted = is_success(st);
          }
          if (is_posted) st = (*a)->recv_poll(posted);
          // Nothing is sent to us: a receive that completed is not the close.
          if (st == Status::ok) st = Status::in_progress;
        }
        if (st == Status::ok || st == Status::in_progress || st == Status::timeout) return false;
        out.ended = st;
        out.after_report = Clock::now() - reported_at;
        return true;
      },
      deadline_after(1500ms));
  // Ended before the packet and its memory go (declared after the instance).
  if (is_posted) (void)(*a)->recv_cancel(posted);
  return out;
}

CONFORMANCE_TEST(IncomingNobodyTakesIsClosed) {
  // A short park limit: the connection is closed 100 ms after it is reported.
  pier::config::ScopedSet tcp_park("TCP_PARK_MS", "100");
  pier::config::ScopedSet shm_park("SHM_PARK_MS", "100");
  pier::config::ScopedSet ofi_park("OFI_PARK_MS", "100");
  Node x, y;
  ASSERT_EQ(make_node(spec(), x, on_demand()), Status::ok);
  ASSERT_EQ(make_node(spec(), y, on_demand()), Status::ok);
  if (!x.props.caps.incoming) GTEST_SKIP() << spec() << " does not report incoming connections";
  // The urls make one of the pair the connector: exactly one of the two
  // directions starts from it (a track each, so the two do not meet). The
  // other starts from the acceptor, whose call backs are not parked.
  const NeverTaken one = connect_to_a_peer_that_never_takes(x, y, Track::small);
  const NeverTaken two = connect_to_a_peer_that_never_takes(y, x, Track::large);
  const bool first_failed = one.ended != Status::timeout;
  const bool second_failed = two.ended != Status::timeout;
  EXPECT_NE(first_failed, second_failed)
      << "expected exactly the connector's direction to be closed: " << to_string(one.ended) << ", "
      << to_string(two.ended);
  for (const NeverTaken* n : {&one, &two}) {
    EXPECT_TRUE(n->reported);
    if (n->ended == Status::timeout) continue;
    EXPECT_FALSE(is_success(n->ended)) << to_string(n->ended);
    // Not before the limit: the core had 100 ms to take it.
    EXPECT_GE(n->after_report, 80ms) << "closed before the park limit";
  }
}

}  // namespace
}  // namespace pier::conformance
