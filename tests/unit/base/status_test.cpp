#include <pier/result.hpp>
#include <pier/status.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

namespace {

using pier::Result;
using pier::Scope;
using pier::Status;

TEST(Status, EveryStatusHasADistinctNameAndText) {
  std::set<std::string_view> names, texts;
  for (std::size_t i = 0; i < pier::status_count; ++i) {
    auto s = static_cast<Status>(i);
    std::string_view name = pier::to_string(s);
    EXPECT_NE(name, "unknown_status") << i;
    EXPECT_FALSE(name.empty());
    EXPECT_NE(pier::describe(s), "unknown status") << name;
    names.insert(name);
    texts.insert(pier::describe(s));
  }
  EXPECT_EQ(names.size(), pier::status_count);
  EXPECT_EQ(texts.size(), pier::status_count);
  EXPECT_EQ(pier::to_string(static_cast<Status>(pier::status_count)), "unknown_status");
}

TEST(Status, CountMatchesTheList) {
  // The last enumerator of the list is internal; nothing lies beyond it.
  EXPECT_EQ(static_cast<std::size_t>(Status::internal) + 1, pier::status_count);
  EXPECT_EQ(pier::to_string(Status::ok), "ok");
  EXPECT_EQ(pier::to_string(Status::no_resource), "no_resource");
}

TEST(Status, ScopeSaysWhatTheErrorDooms) {
  EXPECT_EQ(pier::scope_of(Status::ok), Scope::op);
  EXPECT_EQ(pier::scope_of(Status::truncated), Scope::op);
  EXPECT_EQ(pier::scope_of(Status::malformed), Scope::peer);
  EXPECT_EQ(pier::scope_of(Status::broken), Scope::peer);
  EXPECT_EQ(pier::scope_of(Status::no_memory), Scope::ni);
  EXPECT_EQ(pier::scope_of(Status::internal), Scope::ni);
}

TEST(Status, SuccessIsOkOrInProgress) {
  for (std::size_t i = 0; i < pier::status_count; ++i) {
    auto s = static_cast<Status>(i);
    EXPECT_EQ(pier::is_success(s), s == Status::ok || s == Status::in_progress)
        << pier::to_string(s);
  }
}

TEST(Result, HoldsAValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r);
  EXPECT_TRUE(r.has_value());
  EXPECT_EQ(r.status(), Status::ok);
  EXPECT_EQ(*r, 42);
  EXPECT_EQ(r.value_or(7), 42);
}

TEST(Result, HoldsAFailure) {
  Result<int> r = Status::timeout;
  EXPECT_FALSE(r);
  EXPECT_EQ(r.status(), Status::timeout);
  EXPECT_EQ(r.value_or(7), 7);
}

TEST(Result, MovesOnlyTypes) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r);
  EXPECT_EQ(**r, 5);
  std::unique_ptr<int> taken = std::move(r).value();
  EXPECT_EQ(*taken, 5);
}

TEST(Result, ArrowReachesMembers) {
  Result<std::string> r = std::string("pier");
  EXPECT_EQ(r->size(), 4u);
}

TEST(Result, IsNotDefaultConstructible) {
  static_assert(!std::is_default_constructible_v<Result<int>>);
  SUCCEED();
}

}  // namespace
