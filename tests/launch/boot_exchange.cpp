// tests/launch: a program that bootstraps through whatever started it
// (pier-run, PMI, PMIx, alone) and checks the exchange:
//   boot_exchange [METHOD]   two epochs; each rank puts a short value and a
//                            large one (several PMI-1 chunks) with a key PMI-1
//                            cannot carry as is; every rank reads every
//                            rank's values; a missing key is not_found. Over
//                            pier-run's exchange the second epoch also puts
//                            20000 keys (more than one commit carries).
// METHOD, when given, is the back end that must have been chosen.
//   boot_exchange pmix-fake-version   under PMIx: rank 0 then publishes
//                            "pier 9.9.9" as its pier version (raw PMIx), so
//                            the other ranks' first fence must fail naming it.
// Prints "exchange rank R/N via M: ok"; exits 0 on success, 2 when the
// bootstrap failed (its error printed), 1 on wrong data.
#include "boot/boot.hpp"

#include <fmt/format.h>

#ifdef LAUNCH_HAVE_PMIX_CLIENT
#include <pmix.h>
#endif

#include <string>

namespace {

using pier::boot::Bootstrap;
using pier::boot::Clock;

std::string big_value(std::uint32_t rank, int epoch) {
  std::string v;
  for (int i = 0; v.size() < 5000; ++i) v += fmt::format("<{}:{}:{}>", rank, epoch, i);
  return v;
}

std::string text_of(const std::vector<std::byte>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

}  // namespace

int main(int argc, char** argv) {
  auto opened = Bootstrap::open();
  if (!opened) {
    fmt::print("exchange: cannot open the bootstrap: {}\n", pier::to_string(opened.status()));
    return 2;
  }
  Bootstrap& boot = **opened;
  const auto me = boot.rank();
  const bool fake_version = argc > 1 && std::string(argv[1]) == "pmix-fake-version";
  if (fake_version) {
#ifdef LAUNCH_HAVE_PMIX_CLIENT
    if (me == 0) {
      // A second PMIx_Init is reference counted; the put replaces pier's own.
      pmix_proc_t proc;
      PMIX_PROC_CONSTRUCT(&proc);
      pmix_value_t v;
      PMIX_VALUE_CONSTRUCT(&v);
      v.type = PMIX_STRING;
      v.data.string = const_cast<char*>("pier 9.9.9, pmix keys 1");
      if (PMIx_Init(&proc, nullptr, 0) != PMIX_SUCCESS ||
          PMIx_Put(PMIX_GLOBAL, "pier-boot-version", &v) != PMIX_SUCCESS ||
          PMIx_Commit() != PMIX_SUCCESS) {
        fmt::print("exchange rank 0: cannot publish the fake version\n");
        return 1;
      }
    }
#else
    fmt::print("exchange: built without libpmix\n");
    return 1;
#endif
  } else if (argc > 1 && boot.method() != argv[1]) {
    fmt::print("exchange rank {}: method {} instead of {}\n", me, boot.method(), argv[1]);
    return 1;
  }
  for (int epoch = 1; epoch <= 2; ++epoch) {
    const std::string small_key = fmt::format("small.{}", epoch);
    const std::string big_key =
        fmt::format("big value/{} with spaces={}", epoch, std::string(90, 'k'));
    // Over pier-run's own exchange, the second epoch puts more keys than
    // one commit carries (proto::max_commit_entries): the client sends
    // them as several.
    const int many = epoch == 2 && boot.method() == "pier-run" ? 20000 : 0;
    for (int i = 0; i < many; ++i)
      if (boot.put(fmt::format("many.{}", i), fmt::format("{}.{}", me, i)) != pier::Status::ok) {
        fmt::print("exchange rank {}: put {} failed: {}\n", me, i, boot.last_error());
        return 2;
      }
    if (boot.put(small_key, fmt::format("rank {} epoch {}", me, epoch)) != pier::Status::ok ||
        boot.put(big_key, big_value(me, epoch)) != pier::Status::ok ||
        boot.commit() != pier::Status::ok) {
      fmt::print("exchange rank {}: put/commit failed: {}\n", me, boot.last_error());
      return 2;
    }
    const pier::Status s = boot.fence(Clock::now() + std::chrono::seconds(30));
    if (s != pier::Status::ok) {
      fmt::print("exchange rank {}: fence failed ({}): {}\n", me, pier::to_string(s),
                 boot.last_error());
      return 2;
    }
    for (std::uint32_t r = 0; r < boot.size(); ++r) {
      auto small = boot.get(r, small_key);
      auto big = boot.get(r, big_key);
      for (int i : {0, many / 2, many - 1}) {
        if (many == 0) break;
        auto v = boot.get(r, fmt::format("many.{}", i));
        if (!v || text_of(*v) != fmt::format("{}.{}", r, i)) {
          fmt::print("exchange rank {}: key many.{} of rank {}: {}\n", me, i, r,
                     pier::to_string(v.status()));
          return 1;
        }
      }
      if (!small || text_of(*small) != fmt::format("rank {} epoch {}", r, epoch) || !big ||
          text_of(*big) != big_value(r, epoch)) {
        fmt::print("exchange rank {}: wrong value from rank {} in epoch {} ({}, {})\n", me, r,
                   epoch, pier::to_string(small.status()), pier::to_string(big.status()));
        return 1;
      }
    }
  }
  if (auto missing = boot.get(0, "never.put"); missing.status() != pier::Status::not_found) {
    fmt::print("exchange rank {}: a missing key answered {}\n", me,
               pier::to_string(missing.status()));
    return 1;
  }
  fmt::print("exchange rank {}/{} via {}: ok\n", me, boot.size(), boot.method());
  return 0;
}
