// tests/unit/shm: a fake peer that speaks the connection protocol by hand and
// then writes nonsense: the driver answers broken, never crashes or hangs.
#include "helpers.hpp"

#include "base/config.hpp"
#include "drivers/shm/codec.hpp"
#include "drivers/shm/ring.hpp"
#include "drivers/shm/sys.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace pier::drivers::shm::test {
namespace {

/// A hand-made connector. Its url sorts before any real context's (nonce 0),
/// so the real side accepts.
struct FakePeer {
  Url url;
  std::vector<std::byte> url_bytes;
  Segment seg;
  Fd sock;
  std::uint64_t key = 0x1234567890abcdef;
  std::uint32_t lines = 1024;

  explicit FakePeer(const Side& real) {
    Result<Url> r = decode_url(real.url);
    EXPECT_TRUE(r.has_value());
    url.boot_id = r->boot_id;
    url.pid = static_cast<std::uint32_t>(::getpid());
    url.max_packet = 4096;  // as its segment header and hello say
    url.nonce = 0;
    url_bytes = encode_url(url);
  }

  /// Sends a hello; `tamper` may spoil it first.
  Status connect(const Side& real, Track track, void (*tamper)(Hello&) = nullptr) {
    Result<Url> r = decode_url(real.url);
    if (!r) return r.status();
    Result<Segment> s = create_segment(segment_size(lines));
    if (!s) return s.status();
    seg = std::move(*s);
    write_header(seg.map.data(), SegmentHeader{lines, 4096, key, segment_size(lines)});
    Result<Fd> fd = seqpacket_socket();
    if (!fd) return fd.status();
    sock = std::move(*fd);
    const Status st = connect_abstract(sock.get(), socket_name(r->pid, r->nonce));
    if (st != Status::ok) return st;
    Hello h;
    h.track = track;
    std::copy(url_bytes.begin(), url_bytes.end(), h.url.begin());
    h.ring_lines = lines;
    h.max_packet = 4096;
    h.segment_size = segment_size(lines);
    if (tamper != nullptr) tamper(h);
    return send_message(sock.get(), encode_hello(h), seg.fd.get());
  }

  /// Writes a record header into ring 0 at line `pos` and publishes it.
  void write_record(std::uint64_t pos, std::uint32_t len, std::uint8_t kind,
                    const void* payload = nullptr, std::size_t payload_len = 0) {
    std::byte* line = seg.map.data() + rings_offset + (pos % lines) * line_size;
    std::memcpy(line + 8, &len, 4);
    line[12] = static_cast<std::byte>(kind);
    if (payload_len != 0) std::memcpy(line + record_header, payload, payload_len);
    word(line).store((pos + 1) ^ key, std::memory_order_release);
  }
};

Status connect_to_fake(Instance& inst, Track track, FakePeer& fake, const Side& real,
                       void (*tamper)(Hello&) = nullptr) {
  Status st = inst.connect_async(fake.url_bytes);
  if (st != Status::in_progress) return st;
  st = fake.connect(real, track, tamper);
  if (st != Status::ok) return st;
  return inst.connect_wait(after_ms(5000));
}

TEST(ShmHostile, RecordPastTheRingBreaksTheInstance) {
  Side real = make_side();
  FakePeer fake(real);
  auto inst = open(real, Track::small);
  ASSERT_EQ(connect_to_fake(*inst, Track::small, fake, real), Status::ok);
  const std::uint64_t eight = 0x0807060504030201;
  fake.write_record(0, 8, static_cast<std::uint8_t>(Kind::packet), &eight, 8);
  Packet r;
  ASSERT_EQ(inst->recv_poll(r), Status::ok);  // the fake speaks correctly first
  EXPECT_EQ(0, std::memcmp(r.buf, &eight, 8));
  ASSERT_EQ(inst->recv_buf_release(r), Status::ok);
  fake.write_record(1, 0xffffffffu, static_cast<std::uint8_t>(Kind::packet));
  EXPECT_EQ(inst->recv_poll(r), Status::broken);
  EXPECT_EQ(inst->recv_poll(r), Status::broken);
}

TEST(ShmHostile, UnknownKindAndOutOfProtocolRecordsBreakTheInstance) {
  for (std::uint8_t kind :
       {std::uint8_t{0}, std::uint8_t{99}, static_cast<std::uint8_t>(Kind::rdv_done)}) {
    Side real = make_side();
    FakePeer fake(real);
    auto inst = open(real, Track::large);
    ASSERT_EQ(connect_to_fake(*inst, Track::large, fake, real), Status::ok);
    std::vector<std::byte> buf(64);
    ::iovec iov{buf.data(), buf.size()};
    Packet r;
    r.set_iovec(&iov, 1);
    ASSERT_EQ(inst->recv_post(r), Status::in_progress);
    const std::uint64_t junk[3] = {12345, 1, 2};  // a done record for no token of ours
    fake.write_record(0, 24, kind, junk, sizeof junk);
    EXPECT_EQ(inst->recv_wait(r, after_ms(5000)), Status::broken) << int{kind};
  }
}

TEST(ShmHostile, ADoneRecordForAReceiveWithoutTokenOrTooLongBreaksTheInstance) {
  // A posted receive without rendezvous data (single copy off here) has
  // token 0: a done record naming token 0 must not complete it, nor may any
  // claim more bytes than the receive holds (it completed ok with length
  // 2^40).
  config::ScopedSet cma("SHM_CMA", "0");
  const std::uint64_t records[][3] = {{0, std::uint64_t{1} << 40, std::uint64_t{1} << 40},
                                      {0, 8, 8}};
  for (const auto& rec : records) {
    Side real = make_side();
    FakePeer fake(real);
    auto inst = open(real, Track::large);
    ASSERT_EQ(connect_to_fake(*inst, Track::large, fake, real), Status::ok);
    std::vector<std::byte> buf(64);
    ::iovec iov{buf.data(), buf.size()};
    Packet r;
    r.set_iovec(&iov, 1);
    ASSERT_EQ(inst->recv_post(r), Status::in_progress);
    fake.write_record(0, 24, static_cast<std::uint8_t>(Kind::rdv_done), rec, sizeof rec);
    EXPECT_EQ(inst->recv_wait(r, after_ms(5000)), Status::broken) << rec[1];
  }
}

/// A peer that writes anything but its claim over a posted receive's
/// rendezvous word: canceling that receive waited for a done record that
/// could never come, for ever. It now ends broken at once.
TEST(ShmHostile, GarbageInTheRendezvousWordEndsACancel) {
  Side real = make_side();
  FakePeer fake(real);
  auto inst = open(real, Track::large);
  ASSERT_EQ(connect_to_fake(*inst, Track::large, fake, real), Status::ok);
  std::vector<std::byte> buf(1 << 20);
  ::iovec iov{buf.data(), buf.size()};
  Packet r;
  r.set_iovec(&iov, 1);
  ASSERT_EQ(inst->recv_post(r), Status::in_progress);
  word(fake.seg.map.data() + ctl_offset[0] + ctl_rdv_accept)
      .store(0x1234, std::memory_order_release);
  // In a child: before, the cancel never returned.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(inst->recv_cancel(r) == Status::broken ? 0 : 1);
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 300 && (done = ::waitpid(child, &status, WNOHANG)) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (done == 0) {
    ::kill(child, SIGKILL);
    (void)::waitpid(child, &status, 0);
  }
  ASSERT_EQ(done, child) << "recv_cancel still waiting after 3 s";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/// Split records (the sender asks the receiver to pull half of a single
/// copy) out of protocol: before the sender claimed the receive, for a
/// receive that offered no pull, or a second one. A peer streaming them kept
/// recv_poll copying the whole buffer again and again, never returning.
TEST(ShmHostile, SplitRecordsOutOfProtocolBreakTheInstance) {
  for (int mode = 0; mode < 2; ++mode) {  // 0: unclaimed, 1: a second split
    SCOPED_TRACE(mode == 0 ? "unclaimed" : "second split");
    Side real = make_side();
    if (!real.caps.rdv_data) GTEST_SKIP() << "no single copy here";
    FakePeer fake(real);
    auto inst = open(real, Track::large);
    ASSERT_EQ(connect_to_fake(*inst, Track::large, fake, real), Status::ok);
    std::vector<std::byte> buf(1 << 20);
    ::iovec iov{buf.data(), buf.size()};
    Packet r;
    r.set_iovec(&iov, 1);
    ASSERT_EQ(inst->recv_post(r), Status::in_progress);
    Result<Rdv> rdv = decode_rdv(r);
    ASSERT_TRUE(rdv.has_value());
    std::vector<std::byte> source(64, std::byte{0x5a});
    std::array<std::byte, Split::size> split{};
    encode_split(Split{rdv->token, 0, 64, reinterpret_cast<std::uintptr_t>(source.data())}, split);
    auto accept = word(fake.seg.map.data() + ctl_offset[0] + ctl_rdv_accept);
    std::uint64_t pos = 0;
    if (mode == 1) {
      accept.store(rdv->token | rdv_claimed, std::memory_order_release);
      fake.write_record(pos++, Split::size, static_cast<std::uint8_t>(Kind::rdv_split),
                        split.data(), split.size());
      if (rdv->can_pull) {
        ASSERT_EQ(inst->recv_poll(r), Status::in_progress);  // the one split is served
        EXPECT_NE(accept.load() & (rdv_split_ok | rdv_split_failed), 0u);
        accept.store(rdv->token | rdv_claimed, std::memory_order_release);
      }
    }
    fake.write_record(pos, Split::size, static_cast<std::uint8_t>(Kind::rdv_split), split.data(),
                      split.size());
    EXPECT_EQ(inst->recv_wait(r, after_ms(5000)), Status::broken);
  }
}

/// The sender of a split single copy waits for the receiver's answer in the
/// rendezvous word. Anything else there (the peer's junk, a receive given
/// up) left the send in_progress for ever, with its waiter spinning. It now
/// ends broken.
TEST(ShmHostile, JunkInTheRendezvousWordEndsASplitSend) {
  config::ScopedSet cma_min("SHM_CMA_MIN", "0");
  config::ScopedSet split_min("SHM_SPLIT_MIN", "4096");
  Side real = make_side();
  if (!real.caps.rdv_data) GTEST_SKIP() << "no single copy here";
  FakePeer fake(real);
  auto inst = open(real, Track::large);
  ASSERT_EQ(connect_to_fake(*inst, Track::large, fake, real), Status::ok);
  // The real side accepted: it writes into ring 1 and claims there.
  auto accept = word(fake.seg.map.data() + ctl_offset[1] + ctl_rdv_accept);
  accept.store(7, std::memory_order_release);
  std::vector<std::byte> target(1 << 20), data(1 << 20, std::byte{3});
  ::iovec iov{data.data(), data.size()};
  Packet s;
  s.set_iovec(&iov, 1);
  Rdv rdv;
  rdv.can_pull = true;
  rdv.iov_count = 1;
  rdv.token = 7;
  rdv.addr = reinterpret_cast<std::uintptr_t>(target.data());
  rdv.capacity = target.size();
  rdv.pid = static_cast<std::uint32_t>(::getpid());
  encode_rdv(rdv, s);
  const Status posted = inst->send_post(s);
  if (posted != Status::in_progress) GTEST_SKIP() << "no split copy here: " << to_string(posted);
  ASSERT_EQ(accept.load(), 7u | rdv_claimed);  // claimed, waiting for the pull
  accept.store(0x1234, std::memory_order_release);
  EXPECT_EQ(inst->send_wait(s, after_ms(3000)), Status::broken);
}

/// Eager set-up (nobody calls back): the side that accepts waited for ever
/// for a peer that died before connecting (connect_wait answered timeout
/// and the core's gate stayed connecting). The peer's socket name, unbound
/// once it is gone, now ends the wait broken.
TEST(ShmHostile, AnAcceptorLearnsThatItsPeerDiedBeforeConnecting) {
  Side real = make_side();
  FakePeer fake(real);  // never connects, and nothing listens under its name
  auto inst = open(real, Track::small);
  ASSERT_EQ(inst->connect_async(fake.url_bytes), Status::in_progress);
  Status st = Status::timeout;
  const auto end = Clock::now() + std::chrono::seconds(3);
  while ((st == Status::timeout || st == Status::in_progress) && Clock::now() < end)
    st = inst->connect_wait(after_ms(50));
  EXPECT_EQ(st, Status::broken);
}

/// A skip record that does not run to the ring's end (a writer skips only to
/// wrap): a peer writing short skips one after another kept the reader
/// consuming for as long as it wrote them. It now breaks the instance.
TEST(ShmHostile, AShortSkipBreaksTheInstance) {
  Side real = make_side();
  FakePeer fake(real);
  auto inst = open(real, Track::small);
  ASSERT_EQ(connect_to_fake(*inst, Track::small, fake, real), Status::ok);
  fake.write_record(0, 0, static_cast<std::uint8_t>(Kind::skip));  // one line, not to the end
  const std::uint64_t payload = 42;
  fake.write_record(1, sizeof payload, static_cast<std::uint8_t>(Kind::packet), &payload,
                    sizeof payload);
  Packet r;
  Status st = Status::in_progress;
  for (int i = 0; i < 100 && st == Status::in_progress; ++i) st = inst->recv_poll(r);
  EXPECT_EQ(st, Status::broken);
}

TEST(ShmHostile, FragmentsOrRendezvousRecordsOnASmallTrackBreakTheInstance) {
  // A small track carries whole packets; a receive there would otherwise
  // wait for ever for a posted receive that never comes.
  for (Kind kind : {Kind::frag, Kind::rdv_done, Kind::rdv_split}) {
    Side real = make_side();
    FakePeer fake(real);
    auto inst = open(real, Track::small);
    ASSERT_EQ(connect_to_fake(*inst, Track::small, fake, real), Status::ok);
    const std::uint64_t junk[3] = {1, 2, 3};
    fake.write_record(0, 24, static_cast<std::uint8_t>(kind), junk, sizeof junk);
    Packet r;
    EXPECT_EQ(inst->recv_poll(r), Status::broken) << static_cast<int>(kind);
    EXPECT_EQ(inst->recv_poll(r), Status::broken);
  }
}

TEST(ShmHostile, ReaderPositionOutOfBoundsBreaksTheSender) {
  Side real = make_side();
  FakePeer fake(real);
  auto inst = open(real, Track::small);
  ASSERT_EQ(connect_to_fake(*inst, Track::small, fake, real), Status::ok);
  // Our ring to the fake is ring 1; its reader writes `consumed` nonsense.
  word(fake.seg.map.data() + ctl_offset[1] + ctl_consumed).store(~std::uint64_t{0});
  Status st = Status::ok;
  for (int i = 0; i < 10000 && st == Status::ok; ++i) {
    Packet s;
    st = inst->send_buf_get(s);
    if (st == Status::ok) st = inst->send_buf_post(s, 64);
  }
  EXPECT_EQ(st, Status::broken);
}

TEST(ShmHostile, BadHelloIsRejected) {
  Side real = make_side();
  FakePeer fake(real);
  auto inst = open(real, Track::small);
  EXPECT_EQ(connect_to_fake(*inst, Track::small, fake, real, [](Hello& h) { h.ring_lines = 1000; }),
            Status::broken);
  Side real2 = make_side();
  FakePeer fake2(real2);
  auto inst2 = open(real2, Track::small);
  EXPECT_EQ(
      connect_to_fake(*inst2, Track::small, fake2, real2, [](Hello& h) { h.segment_size += 4096; }),
      Status::broken);
}

/// An instance that failed before its rings were set up (a bad hello here;
/// a peer found dead, a refused call-back) was read by receive-any as if
/// connected: its ring had no memory yet, and probe_any read address 0 (a
/// review). Its failure is reported once, and a buffer receive on it
/// answers broken instead of in_progress for ever.
TEST(ShmHostile, ReceiveAnyAfterABadHelloReportsTheFailureOnce) {
  Side real = make_side();
  FakePeer fake(real);
  auto inst = open(real, Track::small);
  ASSERT_EQ(connect_to_fake(*inst, Track::small, fake, real, [](Hello& h) { h.ring_lines = 1000; }),
            Status::broken);
  driver::Instance* ready = nullptr;
  EXPECT_EQ(real.ctx->probe_any(&ready), Status::ok);
  EXPECT_EQ(ready, inst.get());
  EXPECT_EQ(real.ctx->probe_any(&ready), Status::in_progress);
  if (real.caps.recv_buf) {
    Packet p;
    EXPECT_EQ(inst->recv_poll(p), Status::broken);
  }
}

/// The peer picks the ring size and the acceptor maps (and populates) the
/// whole segment: one far larger than its own is refused (before, a hello
/// could make it commit up to 2 GiB), one within the bound is taken.
TEST(ShmHostile, AHugeRingIsRefusedAModestOneTaken) {
  Side real = make_side();
  FakePeer fake(real);
  fake.lines = 1u << 20;  // 64 MiB per ring; the default here is 8192 lines
  auto inst = open(real, Track::small);
  EXPECT_EQ(connect_to_fake(*inst, Track::small, fake, real), Status::broken);
  Side real2 = make_side();
  FakePeer fake2(real2);
  fake2.lines = accepted_ring_lines(default_ring_lines);
  auto inst2 = open(real2, Track::small);
  EXPECT_EQ(connect_to_fake(*inst2, Track::small, fake2, real2), Status::ok);
}

/// The sockets are abstract: any local user can reach them. A process of
/// another user is closed at once (before, it was kept, waiting for a hello
/// that would have given it a connection).
TEST(ShmHostile, AnotherUsersConnectionIsClosedAtOnce) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  Side real = make_side();
  Result<Url> r = decode_url(real.url);
  ASSERT_TRUE(r.has_value());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    Result<Fd> fd = seqpacket_socket();
    if (!fd || connect_abstract(fd->get(), socket_name(r->pid, r->nonce)) != Status::ok) ::_exit(4);
    ::pollfd p{fd->get(), POLLIN, 0};
    if (::poll(&p, 1, 3000) != 1) ::_exit(1);  // still held open
    char c = 0;
    ::_exit(::recv(fd->get(), &c, 1, 0) == 0 ? 0 : 2);
  }
  std::vector<std::byte> url;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      (void)::waitpid(child, &status, 0);
      break;
    }
    (void)real.ctx->incoming(url);  // drives the accepts
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ShmHostile, PeerClosingItsSocketIsBroken) {
  Side real = make_side();
  FakePeer fake(real);
  auto inst = open(real, Track::small);
  ASSERT_EQ(connect_to_fake(*inst, Track::small, fake, real), Status::ok);
  fake.sock.reset();
  Packet r;
  EXPECT_EQ(inst->recv_wait(r, after_ms(5000)), Status::broken);
}

}  // namespace
}  // namespace pier::drivers::shm::test
