// pier ofi: the RMA rendezvous. Registrations live exactly as long as their
// posted receive, so a buffer freed and mapped again at the same address
// never meets an old registration, and a stale or canceled rdv_data is never
// followed into memory.
#include <sys/mman.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include "drivers/ofi/codec.hpp"
#include "ofi_helpers.hpp"

namespace pier::drivers::ofi::test {
namespace {

class OfiRma : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const Status sx = make_node(GetParam(), x_);
    if (sx == Status::unsupported) {
      GTEST_SKIP() << "ofi:" << GetParam() << " not offered here";
    }
    ASSERT_EQ(sx, Status::ok);
    ASSERT_EQ(make_node(GetParam(), y_), Status::ok);
    if (!x_.props.caps.rdv_data) {
      GTEST_SKIP() << "no RMA rendezvous on " << GetParam();
    }
    ASSERT_EQ(connect(x_, y_, Track::large, l_), Status::ok);
  }
  void TearDown() override {
    l_ = {};
    for (Node* n : {&y_, &x_}) {
      if (n->ctx) {
        EXPECT_EQ(n->ctx->close(), Status::ok);
      }
    }
  }

  /// Sends `src` with the given rdv data into the receive `r` posted on b.
  Status send_into(std::span<std::byte> src, const Packet& rdv_from, Packet& r, Status* rs) {
    ::iovec siov{src.data(), src.size()};
    Packet s;
    s.set_iovec(&siov, 1);
    s.rdv_data = rdv_from.rdv_data;
    s.rdv_len = rdv_from.rdv_len;
    Status ss = l_.a->send_post(s);
    if (!is_success(ss)) return ss;
    *rs = Status::in_progress;
    if (Status d = finish(*l_.a, s, &ss, *l_.b, r, rs); d != Status::ok) return d;
    return ss;
  }

  Node x_, y_;
  Link l_;
};

constexpr std::size_t mib = 1 << 20;

TEST_P(OfiRma, RemappedBufferNeverMeetsAnOldRegistration) {
  void* at = ::mmap(nullptr, mib, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(at, MAP_FAILED);
  std::span<std::byte> region(static_cast<std::byte*>(at), mib);
  std::vector<std::byte> src(mib), other(mib);

  // First life of the buffer: a normal rendezvous.
  ::iovec riov{region.data(), mib};
  Packet r1;
  r1.set_iovec(&riov, 1);
  ASSERT_EQ(l_.b->recv_post(r1), Status::in_progress);
  ASSERT_GT(r1.rdv_len, 0);
  fill(src, 1);
  Status rs = Status::in_progress;
  ASSERT_EQ(send_into(src, r1, r1, &rs), Status::ok);
  ASSERT_EQ(rs, Status::ok);
  EXPECT_TRUE(same(region, 1));

  // Freed and mapped again at the same address: fresh, zeroed pages.
  ASSERT_EQ(::munmap(at, mib), 0);
  void* again = ::mmap(at, mib, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (again != at) {
    if (again != MAP_FAILED) ::munmap(again, mib);
    GTEST_SKIP() << "cannot map at the same address again";
  }
  // Second life: the new pages get a registration of their own, never the
  // first one (libfabric's tcp and shm providers would write through a stale
  // key into whatever is mapped there, so none is kept).
  Packet r3;
  r3.set_iovec(&riov, 1);
  ASSERT_EQ(l_.b->recv_post(r3), Status::in_progress);
  ASSERT_GT(r3.rdv_len, 0);
  // tcp and shm let pier choose keys, so a cached registration would show
  // as the same key for the same address.
  ASSERT_TRUE(decode_rdv(r1).has_value() && decode_rdv(r3).has_value());
  EXPECT_EQ(decode_rdv(r3)->address, decode_rdv(r1)->address);
  EXPECT_NE(decode_rdv(r3)->key, decode_rdv(r1)->key) << "the old registration came back";
  fill(src, 3);
  ASSERT_EQ(send_into(src, r3, r3, &rs), Status::ok);
  EXPECT_EQ(rs, Status::ok);
  EXPECT_TRUE(same(region, 3));
  ::munmap(at, mib);
}

TEST_P(OfiRma, CanceledReceiveLeavesTheNextRendezvousWhole) {
  std::vector<std::byte> first(mib, std::byte{0x5a}), second(mib), src(mib);
  ::iovec iov1{first.data(), mib}, iov2{second.data(), mib};
  Packet r1, r2;
  r1.set_iovec(&iov1, 1);
  r2.set_iovec(&iov2, 1);
  ASSERT_EQ(l_.b->recv_post(r1), Status::in_progress);
  ASSERT_EQ(l_.b->recv_cancel(r1), Status::ok);
  ASSERT_EQ(l_.b->recv_poll(r1), Status::canceled);
  ASSERT_EQ(l_.b->recv_post(r2), Status::in_progress);
  fill(src, 4);
  Status rs = Status::in_progress;
  ASSERT_EQ(send_into(src, r2, r2, &rs), Status::ok);
  EXPECT_EQ(rs, Status::ok);
  EXPECT_TRUE(same(second, 4));
  EXPECT_TRUE(std::all_of(first.begin(), first.end(), [](std::byte b) {
    return b == std::byte{0x5a};
  })) << "the canceled receive's buffer was written";
}

TEST_P(OfiRma, ForgedRendezvousGoesByMessage) {
  std::vector<std::byte> dst(mib), src(mib);
  ::iovec riov{dst.data(), mib};
  Packet r, forged;
  r.set_iovec(&riov, 1);
  ASSERT_EQ(l_.b->recv_post(r), Status::in_progress);
  forged.rdv_data.fill(std::byte{0xa5});
  forged.rdv_len = r.rdv_len;
  fill(src, 6);
  Status rs = Status::in_progress;
  ASSERT_EQ(send_into(src, forged, r, &rs), Status::ok);
  EXPECT_EQ(rs, Status::ok);
  EXPECT_EQ(r.length, mib);
  EXPECT_TRUE(same(dst, 6));
}

/// Registration keys ran 1, 2, 3 in a context: a peer could take its own
/// receive's key, add one, and write into the receive the same process had
/// offered another peer. Keys are now random.
TEST_P(OfiRma, AGuessedKeyNeverReachesAReceiveOfferedToAnotherPeer) {
  if (GetParam() == "shm")
    GTEST_SKIP() << "libfabric's shm provider checks no key (it writes by process_vm_writev, "
                    "which a same-user peer on this host could call itself)";
  Node z;
  ASSERT_EQ(make_node(GetParam(), z), Status::ok);
  Link zl;
  ASSERT_EQ(connect(z, y_, Track::large, zl), Status::ok);
  std::vector<std::byte> for_x(mib), for_z(mib, std::byte{0x5a}), src(mib);
  ::iovec ix{for_x.data(), mib}, iz{for_z.data(), mib};
  Packet rx, rz;
  rx.set_iovec(&ix, 1);
  rz.set_iovec(&iz, 1);
  ASSERT_EQ(l_.b->recv_post(rx), Status::in_progress);
  ASSERT_EQ(zl.b->recv_post(rz), Status::in_progress);
  Result<Rdv> kx = decode_rdv(rx), kz = decode_rdv(rz);
  ASSERT_TRUE(kx.has_value() && kz.has_value());
  Rdv guess = *kx;
  guess.key = kx->key + 1;
  guess.address = kz->address;
  Packet s;
  encode_rdv(guess, s);
  fill(src, 7);
  ::iovec siov{src.data(), mib};
  s.set_iovec(&siov, 1);
  Status ss = l_.a->send_post(s);
  for (const auto end = soon(); ss == Status::in_progress && Clock::now() < end;) {
    ss = l_.a->send_poll(s);
    (void)l_.b->recv_poll(rx);
    (void)zl.b->recv_poll(rz);
  }
  EXPECT_TRUE(std::all_of(for_z.begin(), for_z.end(), [](std::byte b) {
    return b == std::byte{0x5a};
  })) << "a write with a guessed key landed in another peer's receive";
  (void)l_.b->recv_cancel(rx);
  (void)zl.b->recv_cancel(rz);
  zl = {};
  EXPECT_EQ(z.ctx->close(), Status::ok);
}

TEST_P(OfiRma, LongerSendTruncatesIntoTheRegisteredReceive) {
  std::vector<std::byte> dst(1001, std::byte{0xee}), src(5000);
  ::iovec riov{dst.data(), 1000};
  Packet r;
  r.set_iovec(&riov, 1);
  ASSERT_EQ(l_.b->recv_post(r), Status::in_progress);
  fill(src, 5);
  Status rs = Status::in_progress;
  ASSERT_EQ(send_into(src, r, r, &rs), Status::ok);
  EXPECT_EQ(rs, Status::truncated);
  EXPECT_EQ(r.length, 1000u);
  EXPECT_TRUE(same({dst.data(), 1000}, 5));
  EXPECT_EQ(dst[1000], std::byte{0xee}) << "wrote past the receive";
}

/// disconnect() while a rendezvous write is on its way: the bye counts the
/// packet, so the write's notice must still leave (before, the write was
/// marked closed and its notice dropped: the peer's receive waited for
/// ever, here past a 5 s deadline).
TEST_P(OfiRma, DisconnectDuringAWriteStillTellsThePeer) {
  std::vector<std::byte> src(1 << 20), dst(1 << 20);
  fill(src, 3);
  ::iovec siov{src.data(), src.size()}, riov{dst.data(), dst.size()};
  Packet s, r;
  s.set_iovec(&siov, 1);
  r.set_iovec(&riov, 1);
  ASSERT_EQ(l_.b->recv_post(r), Status::in_progress);
  s.rdv_data = r.rdv_data;
  s.rdv_len = r.rdv_len;
  ASSERT_EQ(l_.a->send_post(s), Status::in_progress);
  EXPECT_EQ(l_.a->disconnect(), Status::ok);
  const Status w = l_.b->recv_wait(r, Clock::now() + std::chrono::seconds(5));
  EXPECT_TRUE(w == Status::ok || w == Status::closed) << to_string(w);
  if (w == Status::ok) {
    EXPECT_EQ(r.length, src.size());
    EXPECT_TRUE(same(dst, 3));
  }
  if (w == Status::timeout) (void)l_.b->recv_cancel(r);
}

/// A write that landed in a receive canceled before its notice came: the
/// notice, found by the next receive and refused (not its cookie), is still
/// a packet the peer counts in its bye, so once the peer has said bye the
/// next receive ends `closed` (before, it waited for a packet that had
/// come already, for ever: here past a 5 s deadline).
TEST_P(OfiRma, ANoticeForACanceledReceiveStillCountsTowardsTheBye) {
  // The next receive posted before the peer's bye, and after it (the
  // notice then waits in the provider and the bye is read first: the
  // receive took the notice, counted it and waited again, for ever).
  for (const bool after_bye : {false, true}) {
    SCOPED_TRACE(after_bye ? "receive posted after the bye" : "receive posted before the bye");
    if (after_bye) {
      l_ = {};
      ASSERT_EQ(connect(x_, y_, Track::large, l_), Status::ok);
    }
    std::vector<std::byte> src(mib), first(mib), second(mib);
    fill(src, 5);
    ::iovec siov{src.data(), mib}, iov1{first.data(), mib}, iov2{second.data(), mib};
    Packet s, r1, r2;
    s.set_iovec(&siov, 1);
    r1.set_iovec(&iov1, 1);
    r2.set_iovec(&iov2, 1);
    ASSERT_EQ(l_.b->recv_post(r1), Status::in_progress);
    s.rdv_data = r1.rdv_data;
    s.rdv_len = r1.rdv_len;
    ASSERT_EQ(l_.a->send_post(s), Status::in_progress);
    // The cancel reads b's queue first: the write can land then, and its
    // notice leaves only once a sees the write done, after the cancel.
    ASSERT_EQ(l_.b->recv_cancel(r1), Status::ok);
    // ok: notice and all came before the cancel (nothing to test then).
    const Status first_end = l_.b->recv_poll(r1);
    ASSERT_TRUE(first_end == Status::canceled || first_end == Status::ok) << to_string(first_end);
    EXPECT_EQ(l_.a->send_wait(s, Clock::now() + std::chrono::seconds(5)), Status::ok);
    if (!after_bye) {
      ASSERT_EQ(l_.b->recv_post(r2), Status::in_progress);
    }
    EXPECT_EQ(l_.a->disconnect(), Status::ok);
    if (after_bye) {
      // b reads its queue (the bye) before it posts.
      for (int i = 0; i < 20; ++i) {
        driver::Instance* ready = nullptr;
        (void)y_.ctx->probe_any(&ready);
      }
      const Status p = l_.b->recv_post(r2);
      ASSERT_TRUE(p == Status::in_progress || p == Status::closed) << to_string(p);
      if (p == Status::closed) continue;
    }
    const Status w = l_.b->recv_wait(r2, Clock::now() + std::chrono::seconds(5));
    if (w == Status::timeout) (void)l_.b->recv_cancel(r2);
    // ok: the write was refused after the cancel and came as a message.
    EXPECT_TRUE(w == Status::closed || (w == Status::ok && first_end == Status::canceled))
        << to_string(w);
    if (w == Status::ok) {
      EXPECT_TRUE(same(second, 5));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, OfiRma, ::testing::ValuesIn(providers()),
                         [](const auto& p) { return p.param; });

TEST(OfiUrl, AnotherProvidersUrlIsRefused) {
  Node tcp, shm;
  if (make_node("tcp", tcp) != Status::ok || make_node("shm", shm) != Status::ok) {
    GTEST_SKIP() << "needs both tcp and shm";
  }
  auto inst = tcp.ctx->open_instance(Track::small);
  ASSERT_TRUE(inst.has_value());
  EXPECT_EQ((*inst)->connect_async(shm.url), Status::invalid_argument);
  inst->reset();
  EXPECT_EQ(tcp.ctx->close(), Status::ok);
  EXPECT_EQ(shm.ctx->close(), Status::ok);
}

}  // namespace
}  // namespace pier::drivers::ofi::test
