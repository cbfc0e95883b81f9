// The LIB against hostile wire input: a raw peer (rank 0) sends crafted
// Portals headers to a LIB (rank 1) over the self driver. Nothing may
// assert or crash; each bad packet is dropped or refused, and the LIB keeps
// serving good ones afterwards.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
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
    auto h = wire::PortalsHeader::decode(a.header);
    if (h) answers.push_back(*h);
    (void)core.recv(a.handle, nullptr, nullptr, 0, 0, 0);
  }
  void lib_finalize(void*, Status) noexcept override {}
  core::Core& core;
  std::vector<wire::PortalsHeader> answers;
};

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    for (core::Rank r = 0; r < 2; ++r) {
      auto c = core::Core::create(r, 2);
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

  /// Sends `h` from the raw peer with `length` payload bytes.
  void send(const wire::PortalsHeader& h, std::size_t length) {
    std::array<std::byte, wire::PortalsHeader::size> bytes{};
    ASSERT_TRUE(wire::encode(h, bytes));
    core::SendArgs a;
    a.peer = 1;
    a.upper = wire::Upper::portals;
    a.header = bytes;
    a.region = &region_;
    a.length = length;
    ASSERT_EQ(cores_[0]->send(a), Status::ok);
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

  std::vector<std::unique_ptr<core::Core>> cores_;
  std::unique_ptr<Raw> raw_;
  std::unique_ptr<Lib> lib_;
  std::uint32_t ni_ = 0;
  std::array<std::byte, 64> target_{};
  std::array<std::byte, 4096> payload_{};
  core::Region region_{};
};

TEST_F(Hostile, LyingLengthsAndIndexesAreRefusedNotFatal) {
  auto h = put(1 << 20, 1);  // says a MiB, carries 16 bytes
  send(h, 16);
  h = put(8, 2);
  h.pt_index = 0xffffffff;
  send(h, 8);
  h = put(8, 3);
  h.remote_offset = ~std::uint64_t{0};  // beyond the entry: zero bytes
  send(h, 8);
  ASSERT_TRUE(answers(3));
  EXPECT_EQ(answer_for(1).ni_fail, wire::NiFail::ok);
  EXPECT_LE(answer_for(1).mlength, 64u);  // never more than the entry holds
  EXPECT_EQ(answer_for(2).ni_fail, wire::NiFail::dropped);
  EXPECT_EQ(answer_for(3).ni_fail, wire::NiFail::ok);
  EXPECT_EQ(answer_for(3).mlength, 0u);
  EXPECT_TRUE(drained());
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

}  // namespace
}  // namespace pier::lib
