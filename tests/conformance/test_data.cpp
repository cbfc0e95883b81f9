// pier conformance: contents and boundaries over every send and receive
// form, ordering, back-pressure, many gates, rendezvous data.
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "driver/iovec_data.hpp"
#include "harness.hpp"

namespace pier::conformance {
namespace {

using namespace std::chrono_literals;

enum class Form { iovec_one, iovec_many, data, buffer };

const char* form_name(Form f) {
  switch (f) {
    case Form::iovec_one:
      return "iovec";
    case Form::iovec_many:
      return "iovec x n";
    case Form::data:
      return "data";
    case Form::buffer:
      return "buffer";
  }
  return "?";
}

/// Splits [base, base + len) into n uneven entries (some may be empty).
std::vector<::iovec> split(std::byte* base, std::size_t len, std::uint32_t n) {
  std::vector<::iovec> v;
  std::size_t at = 0;
  for (std::uint32_t i = 0; i + 1 < n; ++i) {
    const std::size_t take = std::min(len - at, (len / (n + 1)) + (i % 2 == 0 ? 3 : 0));
    v.push_back({base + at, take});
    at += take;
  }
  v.push_back({base + at, len - at});
  return v;
}

/// A packet description over memory, in one form; keeps what it points to.
struct Shape {
  Form form = Form::iovec_one;
  std::vector<::iovec> iov;
  pier::driver::IovecData data;
  static constexpr std::size_t data_skip = 5;

  void apply(Packet& pkt, std::byte* base, std::size_t len, std::uint32_t max_iov) {
    switch (form) {
      case Form::iovec_one:
      case Form::buffer:
        iov = {::iovec{base, len}};
        pkt.set_iovec(iov.data(), 1);
        break;
      case Form::iovec_many:
        iov = split(base, len, std::min<std::uint32_t>(max_iov, 5));
        pkt.set_iovec(iov.data(), static_cast<std::uint32_t>(iov.size()));
        break;
      case Form::data:
        // A chunk that starts inside the layout, over three pieces.
        iov = split(base - data_skip, len + data_skip, 3);
        data = pier::driver::IovecData(iov.data(), 3);
        pkt.form = Packet::Form::data;
        pkt.data = &data;
        pkt.chunk_offset = data_skip;
        pkt.chunk_len = len;
        break;
    }
  }
};

class Transfer {
 public:
  Transfer(Instance& tx, Instance& rx, const Caps& caps) : tx_(tx), rx_(rx), caps_(caps) {}

  /// Sends `len` bytes of src in form `sf`, receives them into dst in form
  /// `rf` (Form::buffer: a buffer receive); the receive is posted before the
  /// send when `post_first`. Returns the receive status and sets `got`.
  Status run(std::byte* src, std::byte* dst, std::size_t len, Form sf, Form rf, bool post_first,
             std::size_t* got) {
    const Deadline deadline = default_deadline();
    Packet s, r;
    Shape ss_shape, rs_shape;
    ss_shape.form = sf;
    rs_shape.form = rf;
    Status rs = Status::in_progress;
    const bool buffer_recv = rf == Form::buffer;
    if (!buffer_recv) rs_shape.apply(r, dst, len, caps_.max_iov);
    if (!buffer_recv && post_first) {
      rs = rx_.recv_post(r);
      if (rs != Status::in_progress && rs != Status::ok) return rs;
      s.rdv_data = r.rdv_data;
      s.rdv_len = r.rdv_len;
    }
    Status ss = post_send(s, ss_shape, src, len, deadline);
    if (ss != Status::ok && ss != Status::in_progress) return ss;
    if (buffer_recv) {
      if (ss == Status::in_progress) ss = finish_send(tx_, s, deadline);
      if (ss != Status::ok) return ss;
      Packet b;
      rs = finish_recv(rx_, b, deadline);
      if (rs != Status::ok) return rs;
      *got = b.length;
      if (b.length <= len && b.length > 0) std::memcpy(dst, b.buf, b.length);
      return rx_.recv_buf_release(b);
    }
    if (!post_first) {
      rs = rx_.recv_post(r);
      if (rs != Status::in_progress && rs != Status::ok) return rs;
    }
    if (rs == Status::in_progress) rs = finish_both(tx_, s, &ss, rx_, r, deadline);
    if (ss == Status::in_progress) ss = finish_send(tx_, s, deadline);
    *got = r.length;
    return ss != Status::ok ? ss : rs;
  }

 private:
  Status post_send(Packet& s, Shape& shape, std::byte* src, std::size_t len, Deadline deadline) {
    Status st = Status::no_resource;
    if (shape.form == Form::buffer) {
      const Status d = drive(
          [&] {
            st = tx_.send_buf_get(s);
            return st != Status::no_resource;
          },
          deadline);
      if (d != Status::ok) return d;
      if (st != Status::ok) return st;
      if (s.buf_len < len) return Status::invalid_argument;
      if (len > 0) std::memcpy(s.buf, src, len);
      return tx_.send_buf_post(s, len);
    }
    shape.apply(s, src, len, caps_.max_iov);
    const Status d = drive(
        [&] {
          st = tx_.send_post(s);
          return st != Status::no_resource;
        },
        deadline);
    return d == Status::ok ? st : d;
  }

  Instance& tx_;
  Instance& rx_;
  const Caps& caps_;
};

CONFORMANCE_TEST(Sizes) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  const Caps& c = x.props.caps;
  Link small, large;
  ASSERT_EQ(connect_link(x, y, Track::small, small), Status::ok);
  ASSERT_EQ(connect_link(x, y, Track::large, large), Status::ok);
  constexpr std::size_t sizes[] = {0, 1, 7, 8, 4095, 4096, 65536, 1 << 20, 16 << 20};
  constexpr std::size_t guard = 64;
  // Room before each buffer for the data form's leading skip.
  std::vector<std::byte> src_mem(sizes[8] + 2 * guard), dst_mem(sizes[8] + 2 * guard);
  std::byte* src = src_mem.data() + guard;
  std::byte* dst = dst_mem.data() + guard;
  int cases = 0;
  for (const std::size_t len : sizes) {
    const bool fits_small = c.max_packet == 0 || len <= c.max_packet;
    if (!fits_small && !c.recv_post) continue;
    Link& link = fits_small ? small : large;
    std::vector<std::pair<Form, Form>> plan;
    if (c.recv_post) {
      plan.push_back({Form::iovec_one, Form::iovec_one});
      if (c.max_iov > 1) plan.push_back({Form::iovec_many, Form::iovec_many});
      if (c.supports_data) plan.push_back({Form::data, Form::data});
      if (c.send_buf && fits_small) plan.push_back({Form::buffer, Form::iovec_one});
    }
    if (c.recv_buf && fits_small) {
      plan.push_back({Form::iovec_one, Form::buffer});
      if (c.send_buf) plan.push_back({Form::buffer, Form::buffer});
    }
    for (const auto& [sf, rf] : plan) {
      for (const bool post_first : {true, false}) {
        // A rendezvous track needs the receive first; a buffer receive has no post.
        if (!post_first && (!fits_small || rf == Form::buffer)) continue;
        const std::uint64_t seed = len * 8 + static_cast<unsigned>(sf) * 2 + post_first;
        SCOPED_TRACE(::testing::Message()
                     << len << " bytes on the " << (fits_small ? "small" : "large")
                     << " track, send " << form_name(sf) << ", receive " << form_name(rf)
                     << (post_first ? ", receive posted first" : ", send first"));
        fill_pattern({src, len}, seed);
        std::fill(dst_mem.begin(), dst_mem.begin() + static_cast<std::ptrdiff_t>(len + 2 * guard),
                  std::byte{0xee});
        Transfer t(*link.a, *link.b, c);
        std::size_t got = ~std::size_t{0};
        const Status st = t.run(src, dst, len, sf, rf, post_first, &got);
        if (sf == Form::buffer && st == Status::invalid_argument) continue;  // buffer too short
        ASSERT_EQ(st, Status::ok);
        EXPECT_EQ(got, len);
        EXPECT_EQ(check_pattern({dst, len}, seed), len) << "first wrong byte";
        EXPECT_EQ(dst[len], std::byte{0xee}) << "wrote past the end";
        EXPECT_EQ(dst[-1], std::byte{0xee}) << "wrote before the start";
        ++cases;
        if (rf == Form::buffer) break;
      }
    }
  }
  EXPECT_GT(cases, 0);
  RecordProperty("cases", cases);
}

/// Sends `count` numbered packets of varied sizes through a window of posted
/// sends and checks that they arrive complete and in order.
void stream_in_order(Instance& tx, Instance& rx, const Caps& caps, std::uint32_t count) {
  constexpr std::uint32_t window = 32;
  constexpr std::size_t max_len = 256;
  struct Slot {
    Packet pkt;
    ::iovec iov{};
    std::array<std::byte, max_len> bytes{};
    bool busy = false;  ///< posted and not yet complete
  };
  std::vector<Slot> slots(window);
  std::array<std::byte, max_len> rbuf{};
  ::iovec riov{rbuf.data(), rbuf.size()};
  Packet r;
  bool posted = false;
  std::uint32_t sent = 0, received = 0, oldest = 0;
  auto len_of = [](std::uint32_t i) { return 4 + (i * 37u) % (max_len - 4); };
  auto check = [&](std::span<const std::byte> got) {
    std::uint32_t seq = 0;
    ASSERT_GE(got.size(), 4u);
    std::memcpy(&seq, got.data(), 4);
    ASSERT_EQ(seq, received) << "packet out of order";
    ASSERT_EQ(got.size(), len_of(seq));
    ASSERT_EQ(check_pattern(got.subspan(4), seq), got.size() - 4);
    ++received;
  };
  const Status d = drive(
      [&] {
        // Reap completed sends in order, then post while the window has room.
        while (oldest < sent) {
          Slot& o = slots[oldest % window];
          if (o.busy) {
            const Status st = tx.send_poll(o.pkt);
            if (st == Status::in_progress) break;
            EXPECT_EQ(st, Status::ok);
            o.busy = false;
          }
          ++oldest;
        }
        while (sent < count && sent - oldest < window) {
          Slot& n = slots[sent % window];
          const std::size_t len = len_of(sent);
          std::memcpy(n.bytes.data(), &sent, 4);
          fill_pattern({n.bytes.data() + 4, len - 4}, sent);
          n.pkt = Packet{};
          n.iov = {n.bytes.data(), len};
          n.pkt.set_iovec(&n.iov, 1);
          const Status st = tx.send_post(n.pkt);
          if (st == Status::no_resource) break;
          EXPECT_TRUE(st == Status::ok || st == Status::in_progress) << to_string(st);
          n.busy = st == Status::in_progress;
          ++sent;
        }
        if (caps.recv_post) {
          Status rs = Status::in_progress;
          if (!posted) {
            r = Packet{};
            r.set_iovec(&riov, 1);
            rs = rx.recv_post(r);
            posted = rs == Status::in_progress;
          } else {
            rs = rx.recv_poll(r);
          }
          if (rs != Status::in_progress) {
            posted = false;
            EXPECT_EQ(rs, Status::ok);
            check({rbuf.data(), r.length});
          }
        } else {
          Packet b;
          const Status rs = rx.recv_poll(b);
          if (rs == Status::ok) {
            check({b.buf, b.length});
            EXPECT_EQ(rx.recv_buf_release(b), Status::ok);
          } else {
            EXPECT_EQ(rs, Status::in_progress);
          }
        }
        return received == count || ::testing::Test::HasFatalFailure();
      },
      default_deadline());
  EXPECT_EQ(d, Status::ok) << "sent " << sent << ", received " << received << " of " << count;
  EXPECT_EQ(received, count);
}

CONFORMANCE_TEST(Ordering) {
  Node x, y;
  ASSERT_EQ(make_node(spec(), x), Status::ok);
  ASSERT_EQ(make_node(spec(), y), Status::ok);
  Link l;
  ASSERT_EQ(connect_link(x, y, Track::small, l), Status::ok);
  stream_in_order(*l.a, *l.b, x.props.caps, 5000);
  stream_in_order(*l.b, *l.a, x.props.caps, 2000);
}

}  // namespace
}  // namespace pier::conformance
