// The LIB against hostile wire input: a raw peer (rank 0) sends crafted
// Portals headers to a LIB (rank 1) over the self driver. Nothing may
// assert or crash; each bad packet is dropped or refused, and the LIB keeps
// serving good ones afterwards.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "base/clock.hpp"
#include "base/config.hpp"
#include "core/core.hpp"
#include "lib/lib.hpp"
#include "wire/portals.hpp"

namespace pier::lib {
namespace {

/// Records the answers the LIB sends back.
struct Raw final : core::Client {
  explicit Raw(core::Core& c) : core(c) {}
  void lib_parse(const core::Arrival& a) noexcept override {
    const std::size_t form = a.header.size();
    auto h = form == wire::PortalsHeader::tiny_size || form == wire::PortalsHeader::tiny_get_size
                 ? wire::PortalsHeader::decode_tiny(a.header, a.length)
             : form == wire::PortalsHeader::compact_size
                 ? wire::PortalsHeader::decode_compact(a.header)
                 : wire::PortalsHeader::decode(a.header);
    if (h) {
      answers.push_back(*h);
      header_sizes.push_back(a.header.size());
    }
    if (hold) {  // not taken: the sender's credit stays spent
      held.push_back(a.handle);
      return;
    }
    // With a sink, an answer's data (up to 64 bytes) is kept, one slot each.
    const std::size_t at = 64 * ((answers.size() - 1) % 16);
    const std::size_t n = std::min<std::size_t>(a.length, 64);
    if (sink.handle != 0 && n > 0) {
      (void)core.recv(a.handle, nullptr, &sink, at, n, a.length);
      data.emplace_back(sink_bytes.begin() + static_cast<std::ptrdiff_t>(at),
                        sink_bytes.begin() + static_cast<std::ptrdiff_t>(at + n));
    } else {
      (void)core.recv(a.handle, nullptr, nullptr, 0, 0, 0);
      data.emplace_back();
    }
  }
  void lib_finalize(void*, Status) noexcept override {}
  /// Takes the answers held so far.
  void release() {
    hold = false;
    for (core::Incoming* in : held) (void)core.recv(in, nullptr, nullptr, 0, 0, 0);
    held.clear();
  }
  core::Core& core;
  bool hold = false;  ///< answers are recorded but not taken
  std::vector<core::Incoming*> held;
  std::vector<wire::PortalsHeader> answers;
  std::vector<std::size_t> header_sizes;     ///< of each answer's upper header
  std::vector<std::vector<std::byte>> data;  ///< per answer, with a sink
  std::array<std::byte, 64 * 16> sink_bytes{};
  core::Region sink{};
};

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    for (core::Rank r = 0; r < ranks_; ++r) {
      auto c = core::Core::create(r, ranks_);
      ASSERT_TRUE(c) << to_string(c.status());
      cores_.push_back(std::move(*c));
    }
    std::vector<std::vector<std::byte>> addresses;
    for (auto& c : cores_) addresses.push_back(c->address());
    for (auto& c : cores_) ASSERT_EQ(c->connect(addresses), Status::ok);
    raw_ = std::make_unique<Raw>(*cores_[0]);
    ASSERT_EQ(cores_[0]->attach(wire::Upper::portals, raw_.get(), wire::PortalsHeader::size),
              Status::ok);
    auto lib = Lib::create(*cores_[1]);
    ASSERT_TRUE(lib);
    lib_ = std::move(*lib);
    Call c;
    c.options = PTL_NI_MATCHING | PTL_NI_LOGICAL;
    c.pid = PTL_PID_ANY;
    c.has_limits = has_desired_;
    c.limits = desired_;
    Reply r = lib_->call(Op::ni_init, c);
    ASSERT_EQ(r.rc, PTL_OK);
    ni_ = r.handle;
    c = Call{};
    c.handle = ni_;
    c.handle2 = PTL_EQ_NONE;
    c.pt_index = 0;
    ASSERT_EQ(lib_->call(Op::pt_alloc, c).rc, PTL_OK);
    c = Call{};
    c.handle = ni_;
    c.pt_index = 0;
    c.is_me = true;
    c.list = PTL_PRIORITY_LIST;
    c.me.start = target_.data();
    c.me.length = target_.size();
    c.me.ct_handle = PTL_CT_NONE;
    c.me.uid = PTL_UID_ANY;
    c.me.options = PTL_ME_OP_PUT | PTL_ME_OP_GET;
    c.me.match_id.rank = PTL_RANK_ANY;
    ASSERT_EQ(lib_->call(Op::append, c).rc, PTL_OK);
    auto region = cores_[0]->validate(payload_.data(), payload_.size());
    ASSERT_TRUE(region);
    region_ = *region;
  }

  /// Progresses both cores until the LIB holds no message state (10 s).
  bool drained() {
    auto deadline = base::Deadline::after_ms(10000);
    while (lib_->messages_live() != 0) {
      if (deadline.expired()) return false;
      for (auto& c : cores_) (void)c->progress();
    }
    return true;
  }

  /// An MD over `memory` with neither EQ nor CT (PTL_INVALID_HANDLE when
  /// the bind failed).
  std::uint32_t bind_plain(std::span<std::byte> memory) {
    Call bind{};
    bind.handle = ni_;
    bind.md.start = memory.data();
    bind.md.length = memory.size();
    bind.md.eq_handle = PTL_EQ_NONE;
    bind.md.ct_handle = PTL_CT_NONE;
    Reply md = lib_->call(Op::md_bind, bind);
    EXPECT_EQ(md.rc, PTL_OK);
    return md.rc == PTL_OK ? md.handle : PTL_INVALID_HANDLE;
  }

  /// Sends `h` from the raw peer with `length` payload bytes.
  void send(const wire::PortalsHeader& h, std::size_t length, std::uint8_t priority = 0) {
    std::array<std::byte, wire::PortalsHeader::size> bytes{};
    ASSERT_TRUE(wire::encode(h, bytes));
    core::SendArgs a;
    a.peer = 1;
    a.priority = priority;
    a.upper = wire::Upper::portals;
    a.header = bytes;
    a.region = &region_;
    a.length = length;
    ASSERT_EQ(cores_[0]->send(a), Status::ok);
  }

  /// Sends header bytes as they are (undecodable ones too) with `length`
  /// payload bytes; false when the core refused the send.
  bool send_raw(std::span<const std::byte> header, std::size_t length) {
    core::SendArgs a;
    a.peer = 1;
    a.upper = wire::Upper::portals;
    a.header = header;
    a.region = &region_;
    a.length = length;
    return cores_[0]->send(a) == Status::ok;
  }

  /// Progresses both cores until `n` answers came back or 10 s passed.
  bool answers(std::size_t n) {
    auto deadline = base::Deadline::after_ms(10000);
    while (raw_->answers.size() < n) {
      if (deadline.expired()) return false;
      for (auto& c : cores_) (void)c->progress();
    }
    return true;
  }

  /// Polls `eq` until it is empty; false if it never empties.
  bool empty_eq(std::uint32_t eq) {
    Call poll;
    poll.handle = ni_;
    const ptl_handle_eq_t eqs[] = {eq};
    poll.ptr = eqs;
    poll.size = 1;
    for (int k = 0; k < 100; ++k)
      if (lib_->call(Op::eq_poll, poll).rc == PTL_EQ_EMPTY) return true;
    return false;
  }

  /// The answer carrying `cookie` (answers come in completion order).
  wire::PortalsHeader answer_for(std::uint64_t cookie) {
    for (const auto& a : raw_->answers)
      if (a.cookie == cookie) return a;
    ADD_FAILURE() << "no answer for cookie " << cookie;
    return {};
  }

  wire::PortalsHeader put(std::uint64_t length, std::uint64_t cookie = 77) {
    wire::PortalsHeader h;
    h.op = wire::PortalsOp::put;
    h.ack_request = wire::AckRequest::ack;
    h.length = length;
    h.cookie = cookie;
    return h;
  }

  core::Rank ranks_ = 2;      ///< the LIB is rank 1, the raw peer rank 0
  bool has_desired_ = false;  ///< the NI asks for desired_ as its limits
  ptl_ni_limits_t desired_{};
  std::vector<std::unique_ptr<core::Core>> cores_;
  std::unique_ptr<Raw> raw_;
  std::unique_ptr<Lib> lib_;
  std::uint32_t ni_ = 0;
  std::array<std::byte, 64> target_{};
  std::array<std::byte, 4096> payload_{};
  core::Region region_{};
};

TEST_F(Hostile, LyingLengthsAndIndexesAreRefusedNotFatal) {
  auto h = put(1 << 20, 1);  // says a MiB, carries 16 bytes: dropped
  send(h, 16);
  h = put(4096, 4);  // carries all it says, more than the entry holds
  send(h, 4096);
  h = put(8, 2);
  h.pt_index = 0xffffffff;
  send(h, 8);
  h = put(8, 3);
  h.remote_offset = ~std::uint64_t{0};  // beyond the entry: zero bytes
  send(h, 8);
  ASSERT_TRUE(answers(4));
  EXPECT_EQ(answer_for(1).ni_fail, wire::NiFail::dropped);
  EXPECT_EQ(answer_for(4).ni_fail, wire::NiFail::ok);
  EXPECT_EQ(answer_for(4).mlength, 64u);  // never more than the entry holds
  EXPECT_EQ(answer_for(2).ni_fail, wire::NiFail::dropped);
  EXPECT_EQ(answer_for(3).ni_fail, wire::NiFail::ok);
  EXPECT_EQ(answer_for(3).mlength, 0u);
  // Each answer travels in the shortest form that carries it: tiny (here
  // none: truncated, or naming its target), compact (mlength 0), full.
  for (std::size_t i = 0; i < raw_->answers.size(); ++i)
    EXPECT_EQ(raw_->header_sizes[i], raw_->answers[i].fits_tiny() ? raw_->answers[i].tiny_length()
                                     : raw_->answers[i].fits_compact()
                                         ? wire::PortalsHeader::compact_size
                                         : wire::PortalsHeader::size)
        << i;
  // Both forms were used: an answer with an mlength (64) or an offset
  // cannot be compact, an empty one can.
  const auto compact = std::count(raw_->header_sizes.begin(), raw_->header_sizes.end(),
                                  wire::PortalsHeader::compact_size);
  EXPECT_GE(compact, 1);
  EXPECT_GE(static_cast<std::ptrdiff_t>(raw_->header_sizes.size()) - compact, 1);
  EXPECT_TRUE(drained());
}

TEST_F(Hostile, AHeaderOfNeitherLengthIsRefused) {
  // A full header with bytes after it, and a compact one cut short: neither
  // is read in part. The LIB answers nothing and still serves what follows.
  std::array<std::byte, wire::PortalsHeader::size> full{};
  ASSERT_TRUE(wire::encode(put(8, 7), full));
  std::array<std::byte, 60> shortened{};
  std::copy_n(full.begin(), shortened.size(), shortened.begin());
  ASSERT_TRUE(send_raw(shortened, 8));
  std::array<std::byte, wire::PortalsHeader::compact_size> compact{};
  ASSERT_TRUE(wire::encode_compact(put(8, 8), compact));
  ASSERT_TRUE(send_raw(std::span(compact).first(48), 8));
  send(put(8, 9), 8);
  ASSERT_TRUE(answers(1));
  EXPECT_EQ(raw_->answers.size(), 1u);
  EXPECT_EQ(raw_->answers[0].cookie, 9u);
  EXPECT_TRUE(drained());
}

TEST_F(Hostile, TinyPutsLandAndForgedOnesAreDropped) {
  auto drops = [&] {
    Call c;
    c.handle = ni_;
    c.size = PTL_SR_DROP_COUNT;
    return lib_->call(Op::ni_status, c).sr;
  };
  // Each send takes its data from its own part of the payload.
  std::fill_n(payload_.begin(), 8, std::byte{0x11});
  std::fill_n(payload_.begin() + 8, 8, std::byte{0x44});
  std::fill_n(payload_.begin() + 16, 8, std::byte{0x55});
  auto tiny = [&](std::size_t from, auto&& edit) {
    wire::PortalsHeader h;
    h.op = wire::PortalsOp::put;
    h.length = 8;
    std::array<std::byte, wire::PortalsHeader::tiny_size> bytes{};
    EXPECT_EQ(wire::encode_tiny(h, bytes).value_or(0), bytes.size());
    edit(bytes);
    core::SendArgs a;
    a.peer = 1;
    a.upper = wire::Upper::portals;
    a.header = bytes;
    a.region = &region_;
    a.offset = from;
    a.length = 8;
    EXPECT_EQ(cores_[0]->send(a), Status::ok);
  };
  // A put that wants an ack, behind the tiny ones on the same priority:
  // once it is answered, they were parsed.
  auto fence = [&](std::uint64_t cookie, std::size_t answered) {
    auto h = put(8, cookie);
    h.remote_offset = 32;
    core::SendArgs a;
    std::array<std::byte, wire::PortalsHeader::size> bytes{};
    ASSERT_TRUE(wire::encode(h, bytes));
    a.peer = 1;
    a.upper = wire::Upper::portals;
    a.header = bytes;
    a.region = &region_;
    a.offset = 16;
    a.length = 8;
    ASSERT_EQ(cores_[0]->send(a), Status::ok);
    ASSERT_TRUE(answers(answered));
    EXPECT_EQ(raw_->answers.back().cookie, cookie);
    // An ack of all it asked, at a small offset: the tiny answer.
    EXPECT_EQ(raw_->header_sizes.back(), wire::PortalsHeader::tiny_size);
    EXPECT_EQ(raw_->answers.back().mlength, 8u);
    EXPECT_EQ(raw_->answers.back().remote_offset, 32u);
  };
  // Naming rank 1 (the LIB itself) as the initiator; an unknown flag; a
  // physical put naming an initiator: none lands, and none is answered.
  tiny(0, [](auto& b) { b[2] = std::byte{1}; });
  tiny(0, [](auto& b) { b[0] = std::byte{0x10}; });
  tiny(0, [](auto& b) {
    b[0] = std::byte{0x02};
    b[2] = std::byte{1};
  });
  fence(1, 1);
  EXPECT_EQ(target_[0], std::byte{0});
  EXPECT_EQ(target_[32], std::byte{0x55});
  EXPECT_EQ(drops(), 1u);  // the malformed two never reach an NI
  // The one rank 0 truly sends lands, unanswered.
  tiny(8, [](auto&) {});
  fence(2, 2);
  EXPECT_EQ(target_[0], std::byte{0x44});
  EXPECT_EQ(target_[7], std::byte{0x44});
  EXPECT_EQ(target_[8], std::byte{0});
  EXPECT_EQ(raw_->answers.size(), 2u);
  EXPECT_TRUE(drained());
}

TEST_F(Hostile, ForgedMovesFromTheApiSideAreRefused) {
  // A Move block as another protection domain could forward it: every
  // field the LIB writes into a header is checked there, not only by the
  // C API.
  std::array<std::byte, 16> local{};
  const std::uint32_t md = bind_plain(local);
  ASSERT_NE(md, PTL_INVALID_HANDLE);
  auto start = [&](const Move& mv) {
    int rc = PTL_FAIL;
    EXPECT_EQ(
        lib_->dispatch(static_cast<std::uint32_t>(Op::start_move), std::as_bytes(std::span(&mv, 1)),
                       std::as_writable_bytes(std::span(&rc, 1))),
        Status::ok);
    return rc;
  };
  Move good;
  good.md = md;
  good.get_md = md;
  good.target.rank = 0;
  good.length = 8;
  auto forged = [&](auto&& edit) {
    Move mv = good;
    edit(mv);
    return start(mv);
  };
  // Answer kinds and values past the last operation are no request.
  for (auto op : {wire::PortalsOp::reply, wire::PortalsOp::ack, wire::PortalsOp::ct_ack,
                  wire::PortalsOp::oc_ack, wire::PortalsOp{0}, wire::PortalsOp{200}})
    EXPECT_EQ(forged([&](Move& m) { m.op = op; }), PTL_ARG_INVALID) << static_cast<int>(op);
  // An ack request past PTL_OC_ACK_REQ, on a put or on a get.
  EXPECT_EQ(forged([](Move& m) { m.ack_req = 9; }), PTL_ARG_INVALID);
  EXPECT_EQ(forged([](Move& m) {
              m.op = wire::PortalsOp::get;
              m.ack_req = 200;
            }),
            PTL_ARG_INVALID);
  // An operand on an operation that has none, or of the wrong size.
  EXPECT_EQ(forged([](Move& m) { m.operand_length = 8; }), PTL_ARG_INVALID);
  auto cswap = [](Move& m) {
    m.op = wire::PortalsOp::swap;
    m.atomic_op = PTL_CSWAP;
    m.atomic_type = PTL_UINT64_T;
  };
  EXPECT_EQ(forged([&](Move& m) {
              cswap(m);
              m.operand_length = wire::max_operand_length + 1;
            }),
            PTL_ARG_INVALID);
  EXPECT_EQ(forged([&](Move& m) {
              cswap(m);
              m.operand_length = 4;
            }),
            PTL_ARG_INVALID);
  EXPECT_EQ(forged([&](Move& m) {
              cswap(m);
              m.atomic_op = PTL_SWAP;
              m.operand_length = 8;
            }),
            PTL_ARG_INVALID);
  // Nothing of it was sent; a true put and a true CSWAP still go.
  for (int k = 0; k < 200; ++k)
    for (auto& c : cores_) (void)c->progress();
  EXPECT_TRUE(raw_->answers.empty());
  EXPECT_EQ(start(good), PTL_OK);
  EXPECT_EQ(forged([&](Move& m) {
              cswap(m);
              m.operand_length = 8;
            }),
            PTL_OK);
  EXPECT_TRUE(answers(2));
  EXPECT_EQ(raw_->answers[0].op, wire::PortalsOp::put);
  EXPECT_EQ(raw_->answers[1].op, wire::PortalsOp::swap);
  EXPECT_EQ(raw_->answers[1].operand_length, 8u);
}

TEST_F(Hostile, AnswersForNoOperationAreDropped) {
  wire::PortalsHeader a;
  a.op = wire::PortalsOp::reply;
  a.length = 8;
  a.mlength = 8;
  a.cookie = 0x12345678;  // names no message state
  send(a, 8);
  a.op = wire::PortalsOp::ack;
  a.cookie = ~std::uint64_t{0};
  send(a, 0);
  // The LIB still serves a good request afterwards.
  send(put(8), 8);
  ASSERT_TRUE(answers(1));
  EXPECT_EQ(raw_->answers[0].op, wire::PortalsOp::ack);
  EXPECT_EQ(raw_->answers[0].ni_fail, wire::NiFail::ok);
}

TEST_F(Hostile, AtomicsWithoutDataOrLegalitySurvive) {
  wire::PortalsHeader h;
  h.op = wire::PortalsOp::swap;
  h.atomic_op = wire::AtomicOp::cswap;
  h.atomic_type = wire::AtomicType::int64;
  h.operand_length = 8;
  h.length = 8;
  h.cookie = 5;
  send(h, 0);  // claims operand and data, carries nothing
  h.op = wire::PortalsOp::fetch_atomic;
  h.cookie = 6;
  h.atomic_op = wire::AtomicOp::bxor;
  h.atomic_type = wire::AtomicType::float64;  // illegal pairing
  h.operand_length = 0;
  send(h, 8);
  ASSERT_TRUE(answers(2));
  EXPECT_EQ(answer_for(5).op, wire::PortalsOp::reply);
  EXPECT_EQ(answer_for(6).ni_fail, wire::NiFail::op_violation);
  EXPECT_TRUE(drained());
}

TEST_F(Hostile, PartialElementsAndForgedInitiatorsAreRefused) {
  // A fetch of 7 bytes of int64: no whole element; its reply would carry
  // whatever the bounce slot held before.
  wire::PortalsHeader h;
  h.op = wire::PortalsOp::fetch_atomic;
  h.atomic_op = wire::AtomicOp::sum;
  h.atomic_type = wire::AtomicType::int64;
  h.length = 7;
  h.cookie = 11;
  send(h, 7);
  // A compare-and-swap over two elements, and one whose operand is short.
  h.op = wire::PortalsOp::swap;
  h.atomic_op = wire::AtomicOp::cswap;
  h.operand_length = 8;
  h.length = 16;
  h.cookie = 12;
  send(h, 24);
  h.operand_length = 4;
  h.length = 8;
  h.cookie = 13;
  send(h, 12);
  // A put naming rank 1 as its initiator, sent by rank 0.
  auto p = put(8, 14);
  p.initiator_nid = 1;
  send(p, 8);
  ASSERT_TRUE(answers(4));
  EXPECT_EQ(answer_for(11).ni_fail, wire::NiFail::op_violation);
  EXPECT_EQ(answer_for(12).ni_fail, wire::NiFail::op_violation);
  EXPECT_EQ(answer_for(13).ni_fail, wire::NiFail::op_violation);
  EXPECT_EQ(answer_for(14).ni_fail, wire::NiFail::dropped);
  EXPECT_TRUE(drained());
}

/// A third rank sends puts that want acks and then never progresses again,
/// so it returns no credits: the LIB's answers to it wait in the core's
/// queue for that peer. Answers to rank 0 must not wait behind them.
/// R-L4 write-after-read: a get answered later than it matched (its
/// answer waits for a credit back from the initiator) sent the bytes as
/// they were then, a later put's, not those of its turn. A get within
/// max_war_ordered_size is now answered with a copy taken when it matched.
class FewCredits : public Hostile {
 protected:
  config::ScopedSet credits_{"CORE_CREDITS", "2"};
};

TEST_F(FewCredits, AGetIsAnsweredWithTheBytesOfItsTurn) {
  auto sink = cores_[0]->validate(raw_->sink_bytes.data(), raw_->sink_bytes.size());
  ASSERT_TRUE(sink);
  raw_->sink = *sink;
  send(put(8, 1), 8);  // connects the two cores
  ASSERT_TRUE(answers(1));
  ASSERT_TRUE(drained());
  raw_->answers.clear();
  raw_->data.clear();
  std::memset(target_.data(), 0x11, 8);
  std::memset(payload_.data(), 0x22, 8);
  // Three gets (two low, one high), then a put behind the high one. The
  // LIB answers on high, with two credits toward the raw peer, whose core
  // is not progressed: the third answer waits while the put lands.
  wire::PortalsHeader g;
  g.op = wire::PortalsOp::get;
  g.length = 8;
  // The raw peer holds both credits of each priority again, so the four
  // leave in the order sent (a low get short of a credit would leave after
  // the high put, and rightly read its bytes).
  const auto credits_back = [&] {
    auto info = cores_[0]->gate_info(1);
    return info && info->credits[0] == 2 && info->credits[1] == 2;
  };
  const auto deadline = base::Deadline::after_ms(10000);
  while (!credits_back() && !deadline.expired())
    for (auto& c : cores_) (void)c->progress();
  ASSERT_TRUE(credits_back());
  for (std::uint64_t i = 0; i < 3; ++i) {
    g.cookie = 100 + i;
    send(g, 0, i < 2 ? 0 : 1);
  }
  send(put(8, 500), 8, 1);
  for (int i = 0; i < 20; ++i) (void)cores_[0]->progress();  // all out; no answer yet
  for (int i = 0; i < 2000; ++i) (void)cores_[1]->progress();
  EXPECT_EQ(target_[0], std::byte{0x22});  // the put landed meanwhile
  ASSERT_TRUE(answers(4));
  ASSERT_TRUE(drained());
  int replies = 0;
  for (std::size_t i = 0; i < raw_->answers.size(); ++i) {
    if (raw_->answers[i].op != wire::PortalsOp::reply) continue;
    ++replies;
    ASSERT_EQ(raw_->data[i].size(), 8u);
    EXPECT_EQ(raw_->data[i][0], std::byte{0x11})
        << "the get of cookie " << raw_->answers[i].cookie << " returned the later put's bytes";
  }
  EXPECT_EQ(replies, 3);
}

/// R-L4 write after write: an atomic, then a put to the same 8 bytes, both
/// parsed in one pass. The put landed at once (inside lib_parse) and the
/// atomic, applied when it completed, came after it: X ended V + V, not V.
TEST_F(Hostile, APutIsNotOvertakenByAnEarlierAtomic) {
  send(put(8, 1), 8);  // connects the two cores
  ASSERT_TRUE(answers(1));
  ASSERT_TRUE(drained());
  const std::int64_t start = 5, v = 3;
  std::memcpy(target_.data(), &start, 8);
  std::memcpy(payload_.data(), &v, 8);
  wire::PortalsHeader h;
  h.op = wire::PortalsOp::atomic;
  h.atomic_op = wire::AtomicOp::sum;
  h.atomic_type = wire::AtomicType::int64;
  h.ack_request = wire::AckRequest::ack;
  h.length = 8;
  h.cookie = 7;
  send(h, 8);
  send(put(8, 8), 8);
  for (int i = 0; i < 20; ++i) (void)cores_[0]->progress();  // both out before the LIB runs
  ASSERT_TRUE(answers(3));
  ASSERT_TRUE(drained());
  std::int64_t x = 0;
  std::memcpy(&x, target_.data(), 8);
  EXPECT_EQ(x, v) << "the atomic was applied after the later put";
}

/// An NI that orders writes after reads further than writes after writes
/// (both are asked for, within pier's range of 8 to 64 bytes).
class HostileWarBeyondWaw : public Hostile {
 protected:
  HostileWarBeyondWaw() {
    has_desired_ = true;
    desired_.max_entries = desired_.max_unexpected_headers = desired_.max_mds = 1024;
    desired_.max_cts = desired_.max_eqs = desired_.max_list_size = 1024;
    desired_.max_triggered_ops = 1024;
    desired_.max_pt_index = 63;
    desired_.max_iovecs = 64;
    desired_.max_msg_size = 1 << 30;
    desired_.max_atomic_size = desired_.max_fetch_atomic_size = 512;
    desired_.max_volatile_size = 512;
    desired_.max_waw_ordered_size = 8;
    desired_.max_war_ordered_size = 64;
  }
};

/// R-L4 write after read: a fetch-atomic, then a 16-byte put over the same
/// bytes, both parsed in one pass. The fetch reads when it completes; the
/// put, beyond max_waw_ordered_size but within max_war_ordered_size, was
/// written at once, so the fetch returned the put's bytes and added to
/// them (found by a review).
TEST_F(HostileWarBeyondWaw, AFetchIsNotOvertakenByALaterPut) {
  send(put(8, 1), 8);  // connects the two cores
  ASSERT_TRUE(answers(1));
  ASSERT_TRUE(drained());
  auto sink = cores_[0]->validate(raw_->sink_bytes.data(), raw_->sink_bytes.size());
  ASSERT_TRUE(sink);
  raw_->sink = *sink;
  const std::int64_t start = 5, v = 7;
  std::memcpy(target_.data(), &start, 8);
  std::memcpy(target_.data() + 8, &start, 8);
  for (int i = 0; i < 2; ++i) std::memcpy(payload_.data() + 8 * i, &v, 8);
  wire::PortalsHeader h;
  h.op = wire::PortalsOp::fetch_atomic;
  h.atomic_op = wire::AtomicOp::sum;
  h.atomic_type = wire::AtomicType::int64;
  h.length = 8;
  h.cookie = 7;
  send(h, 8);
  send(put(16, 8), 16);
  for (int i = 0; i < 20; ++i) (void)cores_[0]->progress();  // both out before the LIB runs
  ASSERT_TRUE(answers(3));
  ASSERT_TRUE(drained());
  std::int64_t x = 0, fetched = 0;
  std::memcpy(&x, target_.data(), 8);
  EXPECT_EQ(x, v) << "the fetch was applied after the later put";
  for (std::size_t i = 0; i < raw_->answers.size(); ++i)
    if (raw_->answers[i].cookie == 7 && raw_->data[i].size() >= 8)
      std::memcpy(&fetched, raw_->data[i].data(), 8);
  EXPECT_EQ(fetched, start) << "the fetch read the later put's bytes";
}

class HostileThree : public Hostile {
 protected:
  HostileThree() { ranks_ = 3; }
};

TEST_F(HostileThree, APeerThatReturnsNoCreditsHoldsUpOnlyItsOwnAnswers) {
  Raw silent(*cores_[2]);
  ASSERT_EQ(cores_[2]->attach(wire::Upper::portals, &silent, wire::PortalsHeader::size),
            Status::ok);
  std::array<std::byte, 8> data{};
  auto region = cores_[2]->validate(data.data(), data.size());
  ASSERT_TRUE(region);
  const std::uint32_t grant = cores_[1]->credit_limit(2);
  for (std::uint32_t i = 0; i < grant + 8; ++i) {
    auto h = put(8, 1000 + i);
    h.initiator_nid = 2;
    std::array<std::byte, wire::PortalsHeader::size> bytes{};
    ASSERT_TRUE(wire::encode(h, bytes));
    core::SendArgs a;
    a.peer = 1;
    a.upper = wire::Upper::portals;
    a.header = bytes;
    a.region = &*region;
    a.length = 8;
    Status st = cores_[2]->send(a);
    for (int k = 0; k < 1000 && st == Status::no_resource; ++k) {
      (void)cores_[1]->progress();
      (void)cores_[2]->progress();
      st = cores_[2]->send(a);
    }
    ASSERT_EQ(st, Status::ok);
    (void)cores_[1]->progress();
  }
  // Rank 2 stops here. Rank 1 answers until its credits to rank 2 are gone.
  for (int k = 0; k < 2000; ++k) (void)cores_[1]->progress();
  EXPECT_EQ(cores_[1]->gate_info(2)->credits[1], 0u);  // answers to rank 2 wait
  send(put(8, 7), 8);
  for (int k = 0; k < 20000 && raw_->answers.empty(); ++k) {
    (void)cores_[0]->progress();
    (void)cores_[1]->progress();
  }
  ASSERT_EQ(raw_->answers.size(), 1u);
  EXPECT_EQ(answer_for(7).ni_fail, wire::NiFail::ok);
  // Rank 2 comes back: its answers leave too, and nothing stays behind.
  for (int k = 0; k < 20000 && silent.answers.size() < grant + 8; ++k)
    for (auto& c : cores_) (void)c->progress();
  EXPECT_EQ(silent.answers.size(), grant + 8);
  (void)cores_[2]->detach(wire::Upper::portals, &silent);
}

/// A core with two send slots, both held by answers to a peer that returns
/// no credits: later answers wait in the LIB's answer queue. Requests the
/// LIB refuses (an unallocated index) need no message state, so a peer can
/// send more of them than the queue holds; they now wait, their credits
/// held, instead of their answers being lost past the queue's end.
class FewSendSlots : public HostileThree {
 protected:
  config::ScopedSet slots_{"CORE_SEND_MSGS", "2"};
  config::ScopedSet messages_{"LIB_MESSAGES", "16"};
};

TEST_F(FewSendSlots, RefusalsBeyondTheAnswerQueueWaitInsteadOfLosingAnswers) {
  Raw silent(*cores_[2]);
  silent.hold = true;
  ASSERT_EQ(cores_[2]->attach(wire::Upper::portals, &silent, wire::PortalsHeader::size),
            Status::ok);
  std::array<std::byte, 8> data{};
  auto region = cores_[2]->validate(data.data(), data.size());
  ASSERT_TRUE(region);
  // Sends what the core takes, progressing every core meanwhile.
  auto send_from = [&](core::Rank from, wire::PortalsHeader h, const core::Region& r,
                       std::size_t len) {
    std::array<std::byte, wire::PortalsHeader::size> bytes{};
    EXPECT_TRUE(wire::encode(h, bytes));
    core::SendArgs a;
    a.peer = 1;
    a.upper = wire::Upper::portals;
    a.header = bytes;
    a.region = &r;
    a.length = len;
    Status st = cores_[from]->send(a);
    for (int k = 0; k < 1000 && st == Status::no_resource; ++k) {
      for (auto& c : cores_) (void)c->progress();
      st = cores_[from]->send(a);
    }
    return st == Status::ok;
  };
  // Rank 2 takes none of its acks: once rank 1's credits toward it are
  // spent, its acks hold both send slots and the rest wait in the queue.
  const std::uint32_t from_silent = cores_[1]->credit_limit(2) + 8;
  for (std::uint32_t i = 0; i < from_silent; ++i) {
    auto h = put(8, 1000 + i);
    h.initiator_nid = 2;
    ASSERT_TRUE(send_from(2, h, *region, 8)) << i;
  }
  constexpr std::uint64_t refused = 64;  // twice what the answer queue holds
  auto h = put(0);
  h.pt_index = 5;  // never allocated: refused, R-F1
  std::uint64_t sent = 0;
  for (; sent < refused; ++sent) {
    h.cookie = 5000 + sent;
    if (!send_from(0, h, region_, 0)) break;
  }
  for (int k = 0; k < 2000; ++k)
    for (auto& c : cores_) (void)c->progress();
  // Past half the queue, a request of our own waits too, as for a state:
  // only messages already accepted may add to the queue (an ack each).
  std::array<std::byte, 8> local{};
  const std::uint32_t md = bind_plain(local);
  ASSERT_NE(md, PTL_INVALID_HANDLE);
  Move mv;
  mv.md = md;
  mv.target.rank = 0;
  mv.length = local.size();
  Call put{};
  put.move = mv;
  EXPECT_EQ(lib_->call(Op::move, put).rc, PTL_NO_SPACE);
  // Rank 2 takes its acks: everything is sent and answered, nothing lost.
  silent.release();
  for (; sent < refused; ++sent) {
    h.cookie = 5000 + sent;
    ASSERT_TRUE(send_from(0, h, region_, 0)) << sent;
  }
  auto deadline = base::Deadline::after_ms(10000);
  while ((raw_->answers.size() < refused || silent.answers.size() < from_silent) &&
         !deadline.expired())
    for (auto& c : cores_) (void)c->progress();
  EXPECT_EQ(raw_->answers.size(), refused);
  EXPECT_EQ(silent.answers.size(), from_silent);
  for (const auto& a : raw_->answers) EXPECT_EQ(a.ni_fail, wire::NiFail::dropped);
  // With room again, our put goes.
  EXPECT_EQ(lib_->call(Op::move, put).rc, PTL_OK);
  deadline = base::Deadline::after_ms(10000);
  while (raw_->answers.size() < refused + 1 && !deadline.expired())
    for (auto& core : cores_) (void)core->progress();
  ASSERT_EQ(raw_->answers.size(), refused + 1);
  EXPECT_EQ(raw_->answers.back().op, wire::PortalsOp::put);
  (void)cores_[2]->detach(wire::Upper::portals, &silent);
}

/// A header of any kind with fields drawn mostly from the ranges that reach
/// deep into the LIB (pt 0, small offsets and lengths, legal atomics) and
/// sometimes from anywhere.
wire::PortalsHeader random_header(std::mt19937_64& rng) {
  auto pick = [&](std::uint64_t n) { return rng() % n; };
  auto wild = [&](std::uint64_t usual) { return pick(8) == 0 ? rng() : usual; };
  wire::PortalsHeader h;
  h.op = static_cast<wire::PortalsOp>(1 + pick(wire::portals_op_limit - 1));
  if (h.op == wire::PortalsOp::put || h.op == wire::PortalsOp::atomic)
    h.ack_request = static_cast<wire::AckRequest>(pick(wire::ack_request_limit));
  h.matching = static_cast<wire::Matching>(pick(8) == 0);      // the NI matches
  h.addressing = static_cast<wire::Addressing>(pick(8) == 0);  // and is logical
  if (wire::is_atomic(h.op)) {
    h.atomic_type = static_cast<wire::AtomicType>(1 + pick(wire::atomic_type_limit - 1));
    if (h.op == wire::PortalsOp::swap) {
      h.atomic_op = static_cast<wire::AtomicOp>(11 + pick(8));  // swap .. mswap
      if (h.atomic_op != wire::AtomicOp::swap)
        h.operand_length = static_cast<std::uint32_t>(1 + pick(wire::max_operand_length));
    } else {
      h.atomic_op = static_cast<wire::AtomicOp>(1 + pick(10));  // min .. bxor
    }
  }
  h.pt_index = static_cast<std::uint32_t>(wild(pick(8) == 0 ? 2 : pick(2)));
  h.match_bits = wild(pick(2));
  h.remote_offset = wild(pick(96));
  h.length = wild(pick(160));
  h.cookie = wild(pick(64));
  h.uid = static_cast<std::uint32_t>(wild(0));
  if (wire::is_answer(h.op)) {
    h.ni_fail = static_cast<wire::NiFail>(pick(wire::ni_fail_limit));
    h.mlength = h.length == 0 ? 0 : pick(h.length + 1);
  }
  if (h.addressing == wire::Addressing::physical) {
    h.initiator_pid = static_cast<std::uint32_t>(wild(0));
    h.target_pid = static_cast<std::uint32_t>(wild(0));
  }
  return h;
}

/// Thousands of random requests and answers, a third of them with bytes
/// flipped after encoding: no crash (the sanitizer builds run this too), no
/// message state left behind, and a good put is still served afterwards.
TEST_F(Hostile, RandomHeadersNeverCrashAndLeaveNothingBehind) {
  // Portal 1 has events (a small EQ that fills up) and flow control; use-once,
  // locally managed entries that match anything are appended to it.
  Call c;
  c.handle = ni_;
  c.size = 4;
  Reply eq = lib_->call(Op::eq_alloc, c);
  ASSERT_EQ(eq.rc, PTL_OK);
  Reply ct = lib_->call(Op::ct_alloc, c);
  ASSERT_EQ(ct.rc, PTL_OK);
  c = Call{};
  c.handle = ni_;
  c.handle2 = eq.handle;
  c.options = PTL_PT_FLOWCTRL;
  c.pt_index = 1;
  ASSERT_EQ(lib_->call(Op::pt_alloc, c).rc, PTL_OK);
  std::array<std::byte, 64> other{};
  for (unsigned seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    for (int batch = 0; batch < 25; ++batch) {
      c = Call{};
      c.handle = ni_;
      c.pt_index = 1;
      c.is_me = true;
      c.list = batch % 2 ? PTL_OVERFLOW_LIST : PTL_PRIORITY_LIST;
      c.me.start = other.data();
      c.me.length = other.size();
      c.me.ct_handle = ct.handle;
      c.me.uid = PTL_UID_ANY;
      c.me.options = PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_USE_ONCE | PTL_ME_MANAGE_LOCAL |
                     PTL_ME_EVENT_CT_COMM;
      c.me.match_id.rank = PTL_RANK_ANY;
      c.me.match_bits = 0;
      c.me.ignore_bits = ~ptl_match_bits_t{0};
      c.me.min_free = 0;
      ASSERT_EQ(lib_->call(Op::append, c).rc, PTL_OK);
      for (int i = 0; i < 40; ++i) {
        const wire::PortalsHeader h = random_header(rng);
        std::array<std::byte, wire::PortalsHeader::size> bytes{};
        ASSERT_TRUE(wire::encode(h, bytes)) << "op " << wire::to_string(h.op);
        if (rng() % 3 == 0)
          for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips)
            bytes[rng() % bytes.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
        // Mostly the payload the header announces (the LIB drops the rest).
        const bool carries =
            h.op == wire::PortalsOp::put || wire::is_atomic(h.op) || h.op == wire::PortalsOp::reply;
        const std::uint64_t announced = carries ? std::uint64_t{h.operand_length} + h.length : 0;
        const std::size_t length = rng() % 8 != 0 && announced <= payload_.size()
                                       ? static_cast<std::size_t>(announced)
                                       : rng() % payload_.size();
        ASSERT_TRUE(send_raw(bytes, length));
        for (auto& core : cores_) (void)core->progress();
      }
      ASSERT_TRUE(drained()) << "batch " << batch;
      // Empty the EQ and enable the portal again (a full EQ disabled it).
      ASSERT_TRUE(empty_eq(eq.handle));
      Call enable;
      enable.handle = ni_;
      enable.pt_index = 1;
      ASSERT_EQ(lib_->call(Op::pt_enable, enable).rc, PTL_OK);
    }
  }
  // The draws reach the LIB's depths: served, dropped and flow-controlled.
  std::map<wire::NiFail, int> outcomes;
  for (const auto& a : raw_->answers) ++outcomes[a.ni_fail];
  EXPECT_GT(outcomes[wire::NiFail::ok], 100);
  EXPECT_GT(outcomes[wire::NiFail::dropped], 100);
  EXPECT_GT(outcomes[wire::NiFail::pt_disabled], 10);
  raw_->answers.clear();
  send(put(8, 4242), 8);
  ASSERT_TRUE(answers(1));
  EXPECT_EQ(answer_for(4242).op, wire::PortalsOp::ack);
  EXPECT_TRUE(drained());
  EXPECT_EQ(cores_[1]->gate_status(0), Status::ok);
}

/// The LIB's own operations to the raw peer get forged answers: of the wrong
/// kind, too long, failed, repeated, or for a slot already reused. Each
/// operation then gets its right answer; everything ends, nothing crashes,
/// and the MD's bytes outside the fetched range are never written.
TEST_F(Hostile, ForgedAnswersToLiveOperationsNeverCrash) {
  Call c;
  c.handle = ni_;
  Reply ct = lib_->call(Op::ct_alloc, c);
  ASSERT_EQ(ct.rc, PTL_OK);
  c.size = 16;
  Reply eq = lib_->call(Op::eq_alloc, c);
  ASSERT_EQ(eq.rc, PTL_OK);
  std::array<std::byte, 128> local{};
  c = Call{};
  c.handle = ni_;
  c.md.start = local.data();
  c.md.length = 64;  // the upper half is a guard nobody may write
  c.md.eq_handle = eq.handle;
  c.md.ct_handle = ct.handle;
  c.md.options = PTL_MD_EVENT_CT_ACK | PTL_MD_EVENT_CT_REPLY | PTL_MD_EVENT_CT_SEND;
  Reply md = lib_->call(Op::md_bind, c);
  ASSERT_EQ(md.rc, PTL_OK);
  std::mt19937_64 rng(7);
  auto pick = [&](std::uint64_t n) { return rng() % n; };
  for (int round = 0; round < 300; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    raw_->answers.clear();
    Move m;
    m.md = md.handle;
    m.get_md = md.handle;
    m.target.rank = 0;
    m.length = pick(65);
    m.local_offset = pick(64 - m.length + 1);
    switch (pick(4)) {
      case 0:
        m.op = wire::PortalsOp::get;
        break;
      case 1:
        m.op = wire::PortalsOp::put;
        m.ack_req = static_cast<ptl_ack_req_t>(pick(4));
        break;
      case 2:
        m.op = wire::PortalsOp::fetch_atomic;
        m.atomic_op = PTL_SUM;
        m.atomic_type = PTL_INT32_T;
        m.length = 4 * (1 + pick(16));
        m.local_offset = 4 * pick((64 - m.length) / 4 + 1);
        m.local_get_offset = m.local_offset;
        break;
      default:
        m.op = wire::PortalsOp::swap;
        m.atomic_op = PTL_CSWAP;
        m.atomic_type = PTL_INT64_T;
        m.length = 8;
        m.local_offset = m.local_get_offset = 8 * pick(8);
        m.operand_length = 8;
        break;
    }
    c = Call{};
    c.move = m;
    ASSERT_EQ(lib_->call(Op::move, c).rc, PTL_OK)
        << wire::to_string(m.op) << " length " << m.length << " at " << m.local_offset;
    ASSERT_TRUE(answers(1));
    const wire::PortalsHeader request = raw_->answers[0];
    // Forged answers first, then the right one.
    const int forged = static_cast<int>(pick(4));
    for (int k = 0; k <= forged; ++k) {
      wire::PortalsHeader a;
      const bool right = k == forged;
      const bool wants_reply = request.op != wire::PortalsOp::put;
      if (right) {
        a.op = wants_reply                                       ? wire::PortalsOp::reply
               : request.ack_request == wire::AckRequest::ct_ack ? wire::PortalsOp::ct_ack
               : request.ack_request == wire::AckRequest::oc_ack ? wire::PortalsOp::oc_ack
                                                                 : wire::PortalsOp::ack;
        if (!wants_reply && request.ack_request == wire::AckRequest::none) break;
        a.length = request.length;
        a.mlength = request.length;
      } else {
        a.op = static_cast<wire::PortalsOp>(6 + pick(4));  // reply .. oc_ack
        a.length = pick(8) == 0 ? rng() : pick(200);
        a.mlength = a.length == 0 ? 0 : pick(a.length + 1);
        a.ni_fail = static_cast<wire::NiFail>(pick(wire::ni_fail_limit));
      }
      a.cookie = !right && pick(6) == 0 ? pick(64) : request.cookie;
      a.remote_offset = !right && pick(4) == 0 ? rng() : 0;
      const std::size_t carried =
          a.op == wire::PortalsOp::reply ? std::min<std::uint64_t>(a.mlength, 256) : 0;
      std::array<std::byte, wire::PortalsHeader::size> bytes{};
      ASSERT_TRUE(wire::encode(a, bytes));
      ASSERT_TRUE(send_raw(bytes, carried));
      for (auto& core : cores_) (void)core->progress();
    }
    ASSERT_TRUE(drained());
    for (std::size_t i = 64; i < local.size(); ++i) ASSERT_EQ(local[i], std::byte{0}) << i;
    ASSERT_TRUE(empty_eq(eq.handle));
  }
  EXPECT_EQ(cores_[1]->gate_status(0), Status::ok);
}

/// R-E8: a reply that says 8 bytes but carries none wrote nothing, yet the
/// REPLY event reported 8 bytes delivered. What landed is what is reported.
TEST_F(Hostile, AReplyReportsOnlyTheBytesItCarried) {
  Call c;
  c.handle = ni_;
  c.size = 16;
  Reply eq = lib_->call(Op::eq_alloc, c);
  ASSERT_EQ(eq.rc, PTL_OK);
  std::array<std::byte, 8> local{};
  c = Call{};
  c.handle = ni_;
  c.md.start = local.data();
  c.md.length = local.size();
  c.md.eq_handle = eq.handle;
  c.md.ct_handle = PTL_CT_NONE;
  Reply md = lib_->call(Op::md_bind, c);
  ASSERT_EQ(md.rc, PTL_OK);
  Move m;
  m.md = md.handle;
  m.get_md = md.handle;
  m.target.rank = 0;
  m.length = 8;
  m.op = wire::PortalsOp::get;
  c = Call{};
  c.move = m;
  ASSERT_EQ(lib_->call(Op::move, c).rc, PTL_OK);
  ASSERT_TRUE(answers(1));
  wire::PortalsHeader a;
  a.op = wire::PortalsOp::reply;
  a.length = 8;
  a.mlength = 8;
  a.cookie = raw_->answers[0].cookie;
  std::array<std::byte, wire::PortalsHeader::size> bytes{};
  ASSERT_TRUE(wire::encode(a, bytes));
  ASSERT_TRUE(send_raw(bytes, 0));  // no data
  ASSERT_TRUE(drained());
  Call poll;
  const ptl_handle_eq_t eqs[] = {eq.handle};
  poll.ptr = eqs;
  poll.size = 1;
  Reply ev = lib_->call(Op::eq_poll, poll);
  ASSERT_EQ(ev.rc, PTL_OK);
  EXPECT_EQ(ev.event.type, PTL_EVENT_REPLY);
  EXPECT_EQ(ev.event.mlength, 0u) << "bytes reported that never came";
}

/// Headers whose data is still landing: the raw peer's rendezvous puts get
/// their ready-to-receive, but the raw core is not progressed, so their data
/// does not come until the test lets it. An append or search that takes such
/// a header posts its event, its count, its LINK and its search's end only
/// once the data has landed (R-U2, R-U3, R-C9).
class Landing : public Hostile {
 protected:
  config::ScopedSet small_eager_{"CORE_EAGER_LIMIT", "1K"};

  std::uint32_t make_eq() {
    Call c;
    c.handle = ni_;
    c.size = 64;
    Reply r = lib_->call(Op::eq_alloc, c);
    EXPECT_EQ(r.rc, PTL_OK);
    return r.handle;
  }
  std::uint32_t make_ct() {
    Call c;
    c.handle = ni_;
    Reply r = lib_->call(Op::ct_alloc, c);
    EXPECT_EQ(r.rc, PTL_OK);
    return r.handle;
  }
  ptl_ct_event_t ct_value(std::uint32_t ct) {
    Call c;
    c.handle = ct;
    return lib_->call(Op::ct_get, c).ct;
  }
  /// The next event of `eq` within `rounds` progress passes of `which`
  /// cores (-1: both), or type 0xff.
  ptl_event_t next(std::uint32_t eq, int which, int rounds = 20000) {
    Call poll;
    const ptl_handle_eq_t eqs[] = {eq};
    poll.ptr = eqs;
    poll.size = 1;
    for (int i = 0; i < rounds; ++i) {
      Reply r = lib_->call(Op::eq_poll, poll);
      if (r.rc == PTL_OK) return r.event;
      if (which != 0) (void)cores_[1]->progress();
      if (which != 1) (void)cores_[0]->progress();
    }
    ptl_event_t none{};
    none.type = static_cast<ptl_event_kind_t>(0xff);
    return none;
  }
  ptl_me_t entry(void* start, ptl_size_t length, unsigned options, ptl_match_bits_t bits,
                 ptl_match_bits_t ignore, std::uint32_t ct) {
    ptl_me_t m{};
    m.start = start;
    m.length = length;
    m.ct_handle = ct;
    m.uid = PTL_UID_ANY;
    m.options = options;
    m.match_id.rank = PTL_RANK_ANY;
    m.match_bits = bits;
    m.ignore_bits = ignore;
    return m;
  }
  /// Portal index 1, flow-controlled, feeding a new queue (*eq), with one
  /// entry over `land` for match bits 0x61 (its LINK consumed); then a put
  /// to it by rendezvous, which lands only when the raw core runs again,
  /// and a put that matches nothing, which disables the index. Both are
  /// sent; only the LIB's core is progressed after.
  void disable_behind_a_landing_put(std::vector<std::byte>& land, std::uint32_t* eq) {
    *eq = make_eq();
    Call c;
    c.handle = ni_;
    c.handle2 = *eq;
    c.pt_index = 1;
    c.options = PTL_PT_FLOWCTRL;
    ASSERT_EQ(lib_->call(Op::pt_alloc, c).rc, PTL_OK);
    c = Call{};
    c.handle = ni_;
    c.pt_index = 1;
    c.is_me = true;
    c.list = PTL_PRIORITY_LIST;
    c.me = entry(land.data(), land.size(), PTL_ME_OP_PUT, 0x61, 0, PTL_CT_NONE);
    ASSERT_EQ(lib_->call(Op::append, c).rc, PTL_OK);
    ASSERT_EQ(next(*eq, 1).type, PTL_EVENT_LINK);
    auto h = put(payload_.size(), 1);
    h.pt_index = 1;
    h.match_bits = 0x61;
    send(h, payload_.size());
    h = put(8, 2);
    h.pt_index = 1;
    h.match_bits = 0x99;
    send(h, 8);
    for (int i = 0; i < 4; ++i) (void)cores_[0]->progress();  // out, before any answer
  }
};

/// R-F3: a flow-controlled index's PT_DISABLED comes once the messages
/// already matched on it have finished. A rendezvous put still landing,
/// then a put that matches nothing: the PT_DISABLED came first, before the
/// landing put's PUT (found by a review).
TEST_F(Landing, R_F3_DisabledComesAfterTheEventsOfMessagesAlreadyMatched) {
  std::vector<std::byte> land(payload_.size());
  std::uint32_t eq = 0;
  ASSERT_NO_FATAL_FAILURE(disable_behind_a_landing_put(land, &eq));
  EXPECT_EQ(next(eq, 1, 2000).type, static_cast<ptl_event_kind_t>(0xff))
      << "an event before the matched put landed";
  const ptl_event_t first = next(eq, -1), second = next(eq, -1);
  EXPECT_EQ(first.type, PTL_EVENT_PUT);
  EXPECT_EQ(first.match_bits, 0x61u);
  EXPECT_EQ(second.type, PTL_EVENT_PT_DISABLED);
  EXPECT_EQ(next(eq, -1, 200).type, static_cast<ptl_event_kind_t>(0xff)) << "one PT_DISABLED";
  EXPECT_TRUE(drained());
}

/// The same, re-enabled while the PT_DISABLED is still owed: it comes at
/// the enable, once (it waited for messages matched after the enable too).
TEST_F(Landing, R_F3_AnOwedDisabledComesWhenTheIndexIsEnabledAgain) {
  std::vector<std::byte> land(payload_.size());
  std::uint32_t eq = 0;
  ASSERT_NO_FATAL_FAILURE(disable_behind_a_landing_put(land, &eq));
  EXPECT_EQ(next(eq, 1, 2000).type, static_cast<ptl_event_kind_t>(0xff));
  Call c;
  c.handle = ni_;
  c.pt_index = 1;
  ASSERT_EQ(lib_->call(Op::pt_enable, c).rc, PTL_OK);
  EXPECT_EQ(next(eq, 1, 200).type, PTL_EVENT_PT_DISABLED) << "not at the enable";
  const ptl_event_t landed = next(eq, -1);
  EXPECT_EQ(landed.type, PTL_EVENT_PUT);
  EXPECT_EQ(next(eq, -1, 200).type, static_cast<ptl_event_kind_t>(0xff)) << "one PT_DISABLED";
  EXPECT_TRUE(drained());
}

TEST_F(Landing, TakersOfHeadersStillLandingHearOfThemWhenTheDataIsThere) {
  const std::uint32_t eq = make_eq();
  Call c;
  c.handle = ni_;
  c.handle2 = eq;
  c.pt_index = 1;
  ASSERT_EQ(lib_->call(Op::pt_alloc, c).rc, PTL_OK);
  std::vector<std::byte> over(3 * payload_.size());
  c = Call{};
  c.handle = ni_;
  c.pt_index = 1;
  c.is_me = true;
  c.list = PTL_OVERFLOW_LIST;
  c.me =
      entry(over.data(), over.size(), PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0, ~0ull, PTL_CT_NONE);
  ASSERT_EQ(lib_->call(Op::append, c).rc, PTL_OK);
  ASSERT_EQ(next(eq, 1).type, PTL_EVENT_LINK);
  // A and C by rendezvous, B eager between them.
  auto h = put(payload_.size(), 1);
  h.pt_index = 1;
  h.match_bits = 0x61;
  send(h, payload_.size());
  h = put(40, 2);
  h.pt_index = 1;
  h.match_bits = 0x62;
  send(h, 40);
  h = put(payload_.size(), 3);
  h.pt_index = 1;
  h.match_bits = 0x63;
  send(h, payload_.size());
  for (int i = 0; i < 4; ++i) (void)cores_[0]->progress();  // out, before any answer
  ptl_event_t b = next(eq, 1);
  ASSERT_EQ(b.type, PTL_EVENT_PUT);
  ASSERT_EQ(b.match_bits, 0x62u) << "A landed before the raw core was progressed";
  // C's header in too, whatever packets a pass takes (no data moves: the
  // raw core, which would answer the ready-to-receives, is not progressed).
  for (int i = 0; i < 20; ++i) (void)cores_[1]->progress();
  // A persistent append takes A; a persistent search-delete takes C.
  const std::uint32_t ct_append = make_ct(), ct_search = make_ct();
  std::array<std::byte, 8> small{};
  int tag_append = 0, tag_search = 0;
  c = Call{};
  c.handle = ni_;
  c.pt_index = 1;
  c.is_me = true;
  c.list = PTL_PRIORITY_LIST;
  c.user_ptr = &tag_append;
  c.me = entry(small.data(), small.size(), PTL_ME_OP_PUT | PTL_ME_EVENT_CT_OVERFLOW, 0x61, 0,
               ct_append);
  ASSERT_EQ(lib_->call(Op::append, c).rc, PTL_OK);
  c = Call{};
  c.handle = ni_;
  c.pt_index = 1;
  c.is_me = true;
  c.search_op = PTL_SEARCH_DELETE;
  c.user_ptr = &tag_search;
  c.me = entry(nullptr, 0, PTL_ME_EVENT_CT_OVERFLOW, 0x63, 0, ct_search);
  ASSERT_EQ(lib_->call(Op::search, c).rc, PTL_OK);
  // Nothing landed yet: no event (not the LINK either), no count, no end.
  {
    Call poll;
    const ptl_handle_eq_t eqs[] = {eq};
    poll.ptr = eqs;
    poll.size = 1;
    Reply r = lib_->call(Op::eq_poll, poll);
    EXPECT_EQ(r.rc, PTL_EQ_EMPTY) << "event " << r.event.type << " before the data landed";
  }
  EXPECT_EQ(ct_value(ct_append).success, 0u);
  EXPECT_EQ(ct_value(ct_search).failure, 0u) << "the search ended before its header landed";
  // Now the data: each put's PUT, then the taker's overflow event.
  std::vector<ptl_event_t> evs;
  for (int i = 0; i < 5; ++i) {
    ptl_event_t ev = next(eq, -1);
    if (ev.type == static_cast<ptl_event_kind_t>(0xff)) break;
    evs.push_back(ev);
  }
  ASSERT_EQ(evs.size(), 5u);
  std::vector<ptl_event_kind_t> of_append, of_search;
  for (const ptl_event_t& ev : evs) {
    if (ev.user_ptr == &tag_append) of_append.push_back(ev.type);
    if (ev.user_ptr == &tag_search) of_search.push_back(ev.type);
  }
  ASSERT_EQ(of_append.size(), 2u);
  EXPECT_EQ(of_append[0], PTL_EVENT_PUT_OVERFLOW);
  EXPECT_EQ(of_append[1], PTL_EVENT_LINK);  // R-U3: after its overflow events
  ASSERT_EQ(of_search.size(), 1u);
  EXPECT_EQ(of_search[0], PTL_EVENT_PUT_OVERFLOW);
  EXPECT_EQ(ct_value(ct_append).success, 1u);
  const ptl_ct_event_t sv = ct_value(ct_search);
  EXPECT_EQ(sv.success, 1u);
  EXPECT_EQ(sv.failure, 1u);  // the end of the persistent search, after its success
  EXPECT_TRUE(drained());
}

/// A get's reply still landing when the get's own request fails to leave
/// (its peer failed while the request waited in the LIB's answer queue,
/// here because the core's two send slots held answers the peer never
/// took): the failed request made up an undeliverable answer and released
/// the message while the core still held the reply's cookie, whose
/// finalize then worked on the freed state (a second REPLY event, a second
/// release). Found by a review. The raw peer learns the get's cookie the
/// way any peer could: cookies are pool handles, and a slot used twice
/// shows the step between its generations.
class LandingFewSendSlots : public Landing {
 protected:
  config::ScopedSet slots_{"CORE_SEND_MSGS", "2"};

  /// A get of `length` bytes from the raw peer into the start of `md`.
  int get(std::uint32_t md, std::size_t length) {
    Move m{};
    m.op = wire::PortalsOp::get;
    m.md = md;
    m.get_md = md;
    m.target.rank = 0;
    m.length = length;
    Call c{};
    c.move = m;
    return lib_->call(Op::move, c).rc;
  }
  /// The raw peer's reply to `cookie`, carrying `length` bytes.
  void reply(std::uint64_t cookie, std::size_t length) {
    wire::PortalsHeader a;
    a.op = wire::PortalsOp::reply;
    a.length = length;
    a.mlength = length;
    a.cookie = cookie;
    send(a, length, 1);
  }
};

TEST_F(LandingFewSendSlots, AReplyStillLandingOutlivesTheFailureOfItsRequest) {
  const std::uint32_t eq = make_eq();
  std::vector<std::byte> local(payload_.size());
  Call c{};
  c.handle = ni_;
  c.md.start = local.data();
  c.md.length = local.size();
  c.md.eq_handle = eq;
  c.md.ct_handle = PTL_CT_NONE;
  Reply md = lib_->call(Op::md_bind, c);
  ASSERT_EQ(md.rc, PTL_OK);
  // Two gets answered in turn take the same state: their cookies differ by
  // one generation.
  std::uint64_t cookies[2] = {};
  for (std::uint64_t& cookie : cookies) {
    raw_->answers.clear();
    ASSERT_EQ(get(md.handle, 8), PTL_OK);
    ASSERT_TRUE(answers(1));
    cookie = raw_->answers[0].cookie;
    reply(cookie, 8);
    ASSERT_TRUE(drained());
    ASSERT_EQ(next(eq, -1).type, PTL_EVENT_REPLY);
  }
  ASSERT_GT(cookies[1], cookies[0]);
  const std::uint64_t next_cookie = cookies[1] + (cookies[1] - cookies[0]);
  // The raw peer takes no answer: requests the LIB refuses (an index never
  // allocated) spend its credits toward the raw peer, then its two send
  // slots, and the next answer waits in the LIB's queue.
  raw_->answers.clear();
  raw_->hold = true;
  const std::uint32_t refused = cores_[1]->credit_limit(0) + 3;
  auto h = put(0);
  h.pt_index = 5;
  for (std::uint32_t i = 0; i < refused; ++i) {
    h.cookie = 3000 + i;
    send(h, 0);
    for (auto& core : cores_) (void)core->progress();
  }
  for (int i = 0; i < 200; ++i)
    for (auto& core : cores_) (void)core->progress();
  ASSERT_LT(raw_->answers.size(), refused) << "every refusal left: nothing waits in the LIB";
  // The get's request waits behind them; its reply comes by rendezvous,
  // whose data stays with the raw core, which is not progressed again.
  ASSERT_EQ(get(md.handle, local.size()), PTL_OK);
  reply(next_cookie, payload_.size());
  for (int i = 0; i < 4; ++i) (void)cores_[0]->progress();
  for (int i = 0; i < 200; ++i) (void)cores_[1]->progress();
  // The raw peer fails: the request cannot leave, the reply cannot land.
  cores_[1]->reject_peer(0, Status::broken);
  std::vector<ptl_event_t> events;
  for (ptl_event_t ev = next(eq, 1, 2000); ev.type != 0xff; ev = next(eq, 1, 2000))
    events.push_back(ev);
  ASSERT_EQ(events.size(), 1u) << "a second event for the same get";
  EXPECT_EQ(events[0].type, PTL_EVENT_REPLY);
  EXPECT_EQ(events[0].ni_fail_type, PTL_NI_UNDELIVERABLE);
  EXPECT_EQ(lib_->messages_live(), 0u);
  c = Call{};
  c.handle = md.handle;
  EXPECT_EQ(lib_->call(Op::md_release, c).rc, PTL_OK) << "the MD still counts the get in flight";
}

}  // namespace
}  // namespace pier::lib
