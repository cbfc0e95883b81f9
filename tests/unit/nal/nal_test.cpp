// The protection domains: forward/dispatch through Direct and through the
// progress thread, and communication progressing on that thread while the
// application thread does something else.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "base/config.hpp"
#include "nal/nal.hpp"

namespace pier::nal {
namespace {

/// A toy LIB: op 1 adds two u64; op 2 sends args[0..8) bytes of a region to
/// rank args[8]; incoming messages land in `inbox`. Records the thread.
class ToyLib final : public Lib, public core::Client {
 public:
  explicit ToyLib(core::Core& core) : core_(core) {
    EXPECT_EQ(core_.attach(wire::Upper::portals, this, 8), Status::ok);
  }

  Status dispatch(std::uint32_t op, std::span<const std::byte> args,
                  std::span<std::byte> ret) noexcept override {
    dispatch_thread = std::this_thread::get_id();
    if (op == 1) {
      if (args.size() != 16 || ret.size() != 8) return Status::invalid_argument;
      std::uint64_t a = 0, b = 0;
      std::memcpy(&a, args.data(), 8);
      std::memcpy(&b, args.data() + 8, 8);
      const std::uint64_t sum = a + b;
      std::memcpy(ret.data(), &sum, 8);
      return Status::ok;
    }
    if (op == 2) {
      struct Send {
        core::Region region;
        core::Rank peer;
        std::size_t length;
      } s{};
      if (args.size() != sizeof s) return Status::invalid_argument;
      std::memcpy(&s, args.data(), sizeof s);
      std::array<std::byte, 8> header{};
      core::SendArgs a;
      a.cookie = this;
      a.peer = s.peer;
      a.upper = wire::Upper::portals;
      a.header = header;
      a.region = &s.region;
      a.length = s.length;
      return core_.send(a);
    }
    return Status::not_found;
  }

  void lib_parse(const core::Arrival& a) noexcept override {
    inbox.assign(static_cast<std::size_t>(a.length), std::byte{0});
    auto r = core_.validate(inbox.data(), inbox.size());
    if (!r) return;
    inbox_region = *r;
    (void)core_.recv(a.handle, &inbox, &inbox_region, 0, inbox.size(), inbox.size());
  }
  void lib_finalize(void* cookie, Status status) noexcept override {
    if (status != Status::ok) failures.fetch_add(1);
    if (cookie == this) sent.fetch_add(1);
    if (cookie == &inbox) received.fetch_add(1);
  }

  std::vector<std::byte> inbox;
  core::Region inbox_region;
  std::atomic<int> sent{0}, received{0}, failures{0};
  std::thread::id dispatch_thread;

 private:
  core::Core& core_;
};

struct Pair {
  config::ScopedSet drivers{"CORE_DRIVERS", "self"};
  std::unique_ptr<core::Core> a, b;
  Pair() {
    a = std::move(*core::Core::create(0, 2));
    b = std::move(*core::Core::create(1, 2));
    std::vector<std::vector<std::byte>> addr{a->address(), b->address()};
    EXPECT_EQ(a->connect(addr), Status::ok);
    EXPECT_EQ(b->connect(addr), Status::ok);
  }
};

std::array<std::byte, 16> add_args(std::uint64_t x, std::uint64_t y) {
  std::array<std::byte, 16> v{};
  std::memcpy(v.data(), &x, 8);
  std::memcpy(v.data() + 8, &y, 8);
  return v;
}

TEST(Nal, DirectDispatchesInTheCallersThread) {
  Pair p;
  ToyLib lib(*p.a);
  Direct api(*p.a, lib);
  auto args = add_args(40, 2);
  std::array<std::byte, 8> ret{};
  ASSERT_EQ(api.forward(1, args, ret, base::Deadline::after_ms(5000)), Status::ok);
  std::uint64_t sum = 0;
  std::memcpy(&sum, ret.data(), 8);
  EXPECT_EQ(sum, 42u);
  EXPECT_EQ(lib.dispatch_thread, std::this_thread::get_id());
  EXPECT_EQ(api.forward(9, args, ret, base::Deadline::after_ms(5000)), Status::not_found);
}

TEST(Nal, ProgressThreadForwardsFromManyThreads) {
  Pair p;
  ToyLib lib(*p.a);
  ProgressThread api(*p.a, lib, 8);
  std::vector<std::thread> callers;
  std::atomic<int> right{0};
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&, t] {
      for (std::uint64_t i = 0; i < 200; ++i) {
        auto args = add_args(i, static_cast<std::uint64_t>(t) * 1000);
        std::array<std::byte, 8> ret{};
        if (api.forward(1, args, ret, base::Deadline::after_ms(20000)) != Status::ok) continue;
        std::uint64_t sum = 0;
        std::memcpy(&sum, ret.data(), 8);
        if (sum == i + static_cast<std::uint64_t>(t) * 1000) right.fetch_add(1);
      }
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(right.load(), 800);
  EXPECT_EQ(api.answered(), 800u);
  EXPECT_NE(lib.dispatch_thread, std::this_thread::get_id());
}

TEST(Nal, CommunicationProgressesWhileTheApplicationComputes) {
  Pair p;
  ToyLib lib_a(*p.a), lib_b(*p.b);
  ProgressThread api_a(*p.a, lib_a), api_b(*p.b, lib_b);
  std::vector<std::byte> data(3 << 20);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7);
  auto region = api_a.validate(data.data(), data.size());
  ASSERT_TRUE(region);
  struct {
    core::Region region;
    core::Rank peer;
    std::size_t length;
  } s{*region, 1, data.size()};
  std::array<std::byte, sizeof s> args{};
  std::memcpy(args.data(), &s, sizeof s);
  ASSERT_EQ(api_a.forward(2, args, {}, base::Deadline::after_ms(20000)), Status::ok);
  // The application never polls: only the two threads move the rendezvous.
  auto deadline = base::Deadline::after_ms(20000);
  while ((lib_a.sent.load() == 0 || lib_b.received.load() == 0) && !deadline.expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(lib_a.sent.load(), 1);
  ASSERT_EQ(lib_b.received.load(), 1);
  EXPECT_EQ(lib_b.inbox, data);
  EXPECT_EQ(lib_a.failures.load() + lib_b.failures.load(), 0);
  EXPECT_EQ(api_a.invalidate(*region), Status::ok);
}

/// Forwards a send of `n` bytes of `data` from rank 0 to rank 1.
Status forward_send(Api& api, std::vector<std::byte>& data, core::Region region) {
  struct {
    core::Region region;
    core::Rank peer;
    std::size_t length;
  } s{region, 1, data.size()};
  std::array<std::byte, sizeof s> args{};
  std::memcpy(args.data(), &s, sizeof s);
  return api.forward(2, args, {}, base::Deadline::after_ms(20000));
}

TEST(Nal, WaitingCallerDrivesProgressAndAnswersOtherThreads) {
  Pair p;
  ToyLib lib_a(*p.a), lib_b(*p.b);
  ProgressThread api_a(*p.a, lib_a), api_b(*p.b, lib_b);
  std::vector<std::byte> data(100 << 10, std::byte{5});
  auto region = api_a.validate(data.data(), data.size());
  ASSERT_TRUE(region);
  ASSERT_EQ(forward_send(api_a, data, *region), Status::ok);
  // The receiver's caller waits for the message, driving rank 1 itself.
  auto arrived = [&] { return lib_b.received.load() == 1; };
  ASSERT_EQ(api_b.wait_until(arrived, base::Deadline::after_ms(20000)), Status::ok);
  EXPECT_EQ(lib_b.inbox, data);
  // While a caller waits on rank 0, another thread's forwards are answered
  // (the progress thread stands back: the waiter answers them).
  std::atomic<int> right{0};
  std::atomic<bool> finished{false};
  std::thread other([&] {
    for (std::uint64_t i = 0; i < 100; ++i) {
      auto args = add_args(i, 1);
      std::array<std::byte, 8> ret{};
      if (api_a.forward(1, args, ret, base::Deadline::after_ms(20000)) != Status::ok) continue;
      std::uint64_t sum = 0;
      std::memcpy(&sum, ret.data(), 8);
      if (sum == i + 1) right.fetch_add(1);
    }
    finished.store(true);
  });
  auto all_answered = [&] { return finished.load() && lib_a.sent.load() == 1; };
  EXPECT_EQ(api_a.wait_until(all_answered, base::Deadline::after_ms(30000)), Status::ok);
  other.join();
  EXPECT_EQ(right.load(), 100);
  auto never = [] { return false; };
  EXPECT_EQ(api_a.wait_until(never, base::Deadline::after_ms(5)), Status::timeout);
}

TEST(Nal, DirectWaitDrivesTheCore) {
  Pair p;
  ToyLib lib_a(*p.a), lib_b(*p.b);
  Direct api_a(*p.a, lib_a), api_b(*p.b, lib_b);
  std::vector<std::byte> data(200 << 10, std::byte{9});  // a rendezvous: both sides must progress
  auto region = api_a.validate(data.data(), data.size());
  ASSERT_TRUE(region);
  ASSERT_EQ(forward_send(api_a, data, *region), Status::ok);
  std::thread sender([&] {
    auto sent = [&] { return lib_a.sent.load() == 1; };
    EXPECT_EQ(api_a.wait_until(sent, base::Deadline::after_ms(20000)), Status::ok);
  });
  auto arrived = [&] { return lib_b.received.load() == 1; };
  EXPECT_EQ(api_b.wait_until(arrived, base::Deadline::after_ms(20000)), Status::ok);
  sender.join();
  EXPECT_EQ(lib_b.inbox, data);
  auto never = [] { return false; };
  EXPECT_EQ(api_b.wait_until(never, base::Deadline::after_ms(5)), Status::timeout);
}

}  // namespace
}  // namespace pier::nal
