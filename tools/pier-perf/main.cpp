// pier-perf: latency, bandwidth and message rate per driver and size.
//   pier-run -n 2 pier-perf [--driver shm,tcp] [--sizes 1,8,64K | --min 1 --max 16M]
//                           [--iters N] [--verify] [--json FILE] [--csv FILE]
// Under pier-run the two ranks are two processes; started alone, pier-perf
// runs both roles in two threads of one process (which is how the self
// driver is measured). --api picks what is measured: the driver interface
// (default), Portals 4 puts, or the GM-style ports (api.hpp).
#include "api.hpp"
#include "bench.hpp"
#include "link.hpp"
#include "progress.hpp"
#include "report.hpp"

#include "base/config.hpp"

#include "base/log.hpp"
#include "boot/boot.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <sched.h>

#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

namespace pier::perf {
namespace {

/// Swaps one value with the peer role: through the bootstrap between
/// processes, through shared memory between threads.
class Exchanger {
 public:
  virtual ~Exchanger() = default;
  virtual Result<std::vector<std::byte>> swap(const std::string& key,
                                              std::span<const std::byte> mine,
                                              Deadline deadline) = 0;
};

class BootExchanger final : public Exchanger {
 public:
  BootExchanger(boot::Bootstrap& b, std::uint32_t peer) : boot_(b), peer_(peer) {}
  Result<std::vector<std::byte>> swap(const std::string& key, std::span<const std::byte> mine,
                                      Deadline deadline) override {
    if (Status s = boot_.put(key, mine); s != Status::ok) return s;
    if (Status s = boot_.commit(); s != Status::ok) return s;
    if (Status s = boot_.fence(deadline); s != Status::ok) return s;
    return boot_.get(peer_, key);
  }

 private:
  boot::Bootstrap& boot_;
  std::uint32_t peer_;
};

struct ThreadSlots {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<std::string, int>, std::vector<std::byte>> values;
};

class ThreadExchanger final : public Exchanger {
 public:
  ThreadExchanger(ThreadSlots& slots, int role) : slots_(slots), role_(role) {}
  Result<std::vector<std::byte>> swap(const std::string& key, std::span<const std::byte> mine,
                                      Deadline deadline) override {
    std::unique_lock lock(slots_.mu);
    slots_.values[{key, role_}].assign(mine.begin(), mine.end());
    slots_.cv.notify_all();
    const auto peer_key = std::make_pair(key, 1 - role_);
    if (!slots_.cv.wait_until(lock, deadline, [&] { return slots_.values.contains(peer_key); }))
      return Status::timeout;
    return slots_.values[peer_key];
  }

 private:
  ThreadSlots& slots_;
  int role_;
};

std::vector<std::byte> tagged(char tag, std::string_view text) {
  std::vector<std::byte> out{static_cast<std::byte>(tag)};
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

std::string text_after_tag(const std::vector<std::byte>& v) {
  return v.empty() ? std::string()
                   : std::string(reinterpret_cast<const char*>(v.data()) + 1, v.size() - 1);
}

/// Runs every driver in one role; role 0's reports are the results.
/// Both sides leave a driver together, whatever happened on the way; the
/// peer's failure becomes ours. False when even that exchange failed.
bool agree_end(Exchanger& ex, std::size_t i, DriverReport& rep, Deadline deadline,
               std::string* fatal) {
  auto done = ex.swap(fmt::format("perf.{}.done", i), tagged('D', rep.error), deadline);
  if (!done) {
    *fatal = fmt::format("end of {} could not be agreed: {}", rep.driver, describe(done.status()));
    return false;
  }
  if (rep.error.empty() && !text_after_tag(*done).empty())
    rep.error = "the peer failed: " + text_after_tag(*done);
  return true;
}

std::string size_label(std::size_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return fmt::format("{}M", n >> 20);
  if (n >= 1024 && n % 1024 == 0) return fmt::format("{}K", n >> 10);
  return fmt::format("{}", n);
}

/// The sizes, the rate and a closing sync over an API transport.
Failure run_transport(Transport& t, int role, const Params& params, DriverReport& rep,
                      Progress& progress) {
  ApiBench bench(t, role, params);
  Failure f;
  for (std::size_t k = 0; !f && k < params.sizes.size(); ++k) {
    progress.note(fmt::format("{} {}", rep.driver, size_label(params.sizes[k])));
    SizeResult r;
    f = bench.run_size(params.sizes[k], r);
    if (!f) rep.sizes.push_back(r);
    progress.step(rep.driver);
  }
  if (!f) f = bench.run_rate(rep.rate);
  rep.has_rate = !f;
  if (!f) f = bench.sync();  // the peer is done before either side closes
  progress.step(rep.driver);
  t.drain(Clock::now() + std::chrono::seconds(5));
  if (f) rep.error = fmt::format("{}: {}", f.what, describe(f.status));
  return f;
}

/// The port API between two processes, one core per driver.
std::vector<DriverReport> run_port_role(int role, Exchanger& ex,
                                        const std::vector<std::string>& drivers,
                                        const Params& params, Progress& progress,
                                        std::string* fatal) {
  std::vector<DriverReport> reports;
  const auto deadline = [&] {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(params.timeout_s));
  };
  std::size_t largest = 8;
  for (auto s : params.sizes) largest = std::max(largest, s);
  for (std::size_t i = 0; i < drivers.size(); ++i) {
    DriverReport rep;
    rep.driver = drivers[i];
    std::string why;
    bool exchange_failed = false;
    auto t = open_port(
        drivers[i], static_cast<std::uint32_t>(role), largest,
        [&](std::span<const std::byte> mine) {
          return ex.swap(fmt::format("perf.{}.url", i), mine, deadline());
        },
        deadline(), &why, &exchange_failed);
    if (exchange_failed) {
      *fatal = fmt::format("{}: {}", drivers[i], why);
      return reports;
    }
    if (!t && why.rfind("unavailable", 0) == 0) {
      rep.skipped = why;
    } else if (!t) {
      rep.error = why;
    } else {
      rep.ran = true;
      (void)run_transport(**t, role, params, rep, progress);
    }
    if (t) t->reset();  // the core goes before the next driver's comes up
    if (!agree_end(ex, i, rep, deadline(), fatal)) {
      reports.push_back(std::move(rep));
      return reports;
    }
    reports.push_back(std::move(rep));
  }
  return reports;
}

/// Runs every driver in one role; role 0's reports are the results.
std::vector<DriverReport> run_role(int role, std::uint32_t ranks, Exchanger& ex,
                                   const std::vector<std::string>& drivers, const Params& params,
                                   Progress& progress, std::string* fatal) {
  std::vector<DriverReport> reports;
  const auto deadline = [&] {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(params.timeout_s));
  };
  for (std::size_t i = 0; i < drivers.size(); ++i) {
    DriverReport rep;
    rep.driver = drivers[i];
    std::string why;
    auto link = Link::create(drivers[i], static_cast<std::uint32_t>(role), ranks, &why);
    auto mine = link ? tagged('U', {reinterpret_cast<const char*>((*link)->url().data()),
                                    (*link)->url().size()})
                     : tagged('X', why);
    auto peer = ex.swap(fmt::format("perf.{}.url", i), mine, deadline());
    if (!peer || peer->empty()) {
      *fatal = fmt::format("url exchange for {} failed: {}", drivers[i], describe(peer.status()));
      return reports;
    }
    if (!link) {
      rep.skipped = "unavailable: " + why;
    } else if (std::to_integer<char>((*peer)[0]) != 'U') {
      rep.skipped = "unavailable at the peer: " + text_after_tag(*peer);
    } else {
      rep.ran = true;
      rep.has_caps = true;
      rep.caps = (*link)->caps();
      rep.profile = (*link)->profile();
      std::vector<std::byte> url((*peer).begin() + 1, (*peer).end());
      Failure f = (*link)->connect(url, deadline());
      Bench bench(**link, role, params);
      for (std::size_t k = 0; !f && k < params.sizes.size(); ++k) {
        progress.note(fmt::format("{} {}", drivers[i], size_label(params.sizes[k])));
        SizeResult r;
        f = bench.run_size(params.sizes[k], r);
        if (!f) rep.sizes.push_back(r);
        progress.step(drivers[i]);
      }
      if (!f) f = bench.run_rate(rep.rate);
      rep.has_rate = !f;
      if (!f) f = bench.sync();  // the peer is done with the link before we close it
      progress.step(drivers[i]);
      if (f) rep.error = fmt::format("{}: {}", f.what, describe(f.status));
      rep.degraded = (*link)->degraded_reason();
    }
    if (!agree_end(ex, i, rep, deadline(), fatal)) {
      reports.push_back(std::move(rep));
      return reports;
    }
    reports.push_back(std::move(rep));
  }
  return reports;
}

Result<std::size_t> parse_size(std::string text) {
  std::size_t mult = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k':
      case 'K':
        mult = 1u << 10;
        break;
      case 'm':
      case 'M':
        mult = 1u << 20;
        break;
      case 'g':
      case 'G':
        mult = 1u << 30;
        break;
      default:
        break;
    }
    if (mult != 1) text.pop_back();
  }
  std::size_t pos = 0;
  try {
    const unsigned long long v = std::stoull(text, &pos);
    if (pos != text.size() || v == 0 || v > (1ull << 30) / mult) return Status::invalid_argument;
    return static_cast<std::size_t>(v) * mult;
  } catch (...) {
    return Status::invalid_argument;
  }
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const auto end = comma == std::string::npos ? text.size() : comma;
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> default_drivers(bool threads) {
  if (threads) return {"self"};
  // Between processes: every built-in driver but self (one process only)
  // and fault (a wrapper: ask for it explicitly, "fault:shm").
  std::vector<std::string> out;
  for (const auto& e : driver::builtin_drivers())
    if (e.name != "self" && e.name != "fault") out.emplace_back(e.name);
  return out;
}

/// In thread mode, puts the two roles on two different CPUs when allowed:
/// otherwise the scheduler may stack both spinning threads on one CPU.
/// Returns the CPU ids used, empty when not pinned.
std::vector<int> pick_two_cpus() {
  ::cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.size() < 2) cpus.clear();
  return cpus;
}

void pin_this_thread(int cpu) {
  ::cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  (void)::pthread_setaffinity_np(::pthread_self(), sizeof one, &one);
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) fmt::print(stderr, "pier-perf: cannot write {}\n", path);
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "pier-perf: latency, bandwidth and message rate per driver and message size.\n"
      "Run as `pier-run -n 2 pier-perf ...` (two processes), or alone (two threads)."};
  std::string driver_list, size_list, min_text = "1", max_text = "16M", json_path, csv_path;
  Params params;
  std::string mode = "driver";
  app.add_option("--api,--mode", mode,
                 "what to measure: driver (the driver interface, default), portals (Portals 4 "
                 "puts; one core driver list per run, from --driver) or port (GM-style ports "
                 "over a core per driver); portals and port need two ranks")
      ->check(CLI::IsMember({"driver", "portals", "port"}));
  bool no_progress = false;
  double progress_after_s = 1.0;
  app.add_option("--progress-after", progress_after_s,
                 "seconds before the progress bar appears (default 1: short runs stay quiet)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-progress", no_progress,
               "no progress bar (it is drawn on stderr only when that is a terminal, after 1 s)");
  app.add_option("--driver", driver_list, "comma-separated driver specs (default: all usable)");
  app.add_option("--sizes", size_list, "comma-separated sizes, suffixes K, M, G");
  app.add_option("--min", min_text, "smallest size of the power-of-two sweep");
  app.add_option("--max", max_text, "largest size of the power-of-two sweep");
  app.add_option("--iters", params.iters,
                 "round trips and streamed messages per size (default: by size)");
  app.add_option("--reps", params.repetitions, "bandwidth and rate repetitions")
      ->check(CLI::Range(1, 100));
  app.add_flag("--verify", params.verify, "check every received byte");
  bool pin_threads = false;
  app.add_flag("--pin-threads", pin_threads,
               "started alone: pin the two roles' threads to two CPUs (helps on an idle host; "
               "on a loaded one a preempted lock holder then stalls its peer for a whole tick)");
  app.add_option("--timeout", params.timeout_s, "seconds allowed per phase")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the results as JSON to this file");
  app.add_option("--csv", csv_path, "write the per-size results as CSV to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (!size_list.empty()) {
    for (const auto& s : split(size_list)) {
      auto v = parse_size(s);
      if (!v) {
        fmt::print(stderr, "pier-perf: bad size '{}'\n", s);
        return 2;
      }
      params.sizes.push_back(*v);
    }
  } else {
    auto lo = parse_size(min_text), hi = parse_size(max_text);
    if (!lo || !hi || *lo > *hi) {
      fmt::print(stderr, "pier-perf: bad --min/--max\n");
      return 2;
    }
    for (std::size_t s = *lo; s <= *hi; s *= 2) params.sizes.push_back(s);
  }

  RunReport report;
  report.mode = mode;
  report.ranks = 2;
  report.params = params;
  std::string fatal;
  std::uint32_t rank = 0;
  if (mode == "portals") {
    // PtlInit joins the job itself (a process joins the launcher once), so
    // pier-perf opens no bootstrap of its own here, and measures one core
    // driver list per run.
    std::size_t largest = 8;
    for (auto s : params.sizes) largest = std::max(largest, s);
    std::uint32_t ranks = 0;
    std::string why;
    auto t = open_portals(driver_list, largest, &rank, &ranks, &why);
    if (t && ranks != 2) {
      fmt::print(stderr, "pier-perf: --api portals runs on 2 ranks (pier-run -n 2), not {}\n",
                 ranks);
      return 2;
    }
    report.placement = "processes";
    report.bootstrap = "PtlInit";
    DriverReport rep;
    rep.driver = driver_list.empty() ? config::get_text("CORE_DRIVERS").value_or("?") : driver_list;
    if (!t) {
      rep.error = why;
    } else {
      rep.ran = true;
      Progress progress(rank == 0 && !no_progress, params.sizes.size() + 1, progress_after_s);
      (void)run_transport(**t, static_cast<int>(rank), params, rep, progress);
    }
    report.drivers.push_back(std::move(rep));
  } else {
    auto boot = boot::Bootstrap::open();
    if (!boot) {
      fmt::print(stderr, "pier-perf: bootstrap failed: {}\n", describe(boot.status()));
      return 1;
    }
    const std::uint32_t ranks = (*boot)->size();
    rank = (*boot)->rank();
    if (ranks > 2 || (ranks == 1 && mode != "driver")) {
      fmt::print(stderr, "pier-perf: --api {} runs on {}, not {} rank{}\n", mode,
                 mode == "driver" ? "1 rank (two threads) or 2 ranks" : "2 ranks (pier-run -n 2)",
                 ranks, ranks == 1 ? "" : "s");
      return 2;
    }
    const bool threads = ranks == 1;
    const auto drivers = driver_list.empty() ? default_drivers(threads) : split(driver_list);
    report.placement = threads ? "threads" : "processes";
    report.bootstrap = std::string((*boot)->method());
    Progress progress(rank == 0 && !no_progress, drivers.size() * (params.sizes.size() + 1),
                      progress_after_s);
    if (threads) {
      ThreadSlots slots;
      std::string peer_fatal;
      Progress quiet(false, 1, 0);
      const auto cpus = pin_threads ? pick_two_cpus() : std::vector<int>{};
      if (!cpus.empty()) {
        pin_this_thread(cpus[0]);
        report.thread_cpus = cpus;
      }
      std::thread peer([&] {
        if (!cpus.empty()) pin_this_thread(cpus[1]);
        ThreadExchanger ex(slots, 1);
        (void)run_role(1, 2, ex, drivers, params, quiet, &peer_fatal);
      });
      ThreadExchanger ex(slots, 0);
      report.drivers = run_role(0, 2, ex, drivers, params, progress, &fatal);
      peer.join();
    } else if (mode == "port") {
      BootExchanger ex(**boot, 1 - rank);
      report.drivers = run_port_role(static_cast<int>(rank), ex, drivers, params, progress, &fatal);
    } else {
      BootExchanger ex(**boot, 1 - rank);
      report.drivers = run_role(static_cast<int>(rank), 2, ex, drivers, params, progress, &fatal);
    }
    progress.clear();
  }
  bool failed = !fatal.empty();
  for (const auto& d : report.drivers) failed |= !d.error.empty();
  if (rank == 0) {
    print_table(report);
    if (!fatal.empty()) fmt::print(stderr, "pier-perf: {}\n", fatal);
    if (!json_path.empty() && !write_file(json_path, to_json(report))) failed = true;
    if (!csv_path.empty() && !write_file(csv_path, to_csv(report))) failed = true;
  } else {
    // Rank 0 prints the report; a failure seen only here must still show.
    if (!fatal.empty()) fmt::print(stderr, "pier-perf rank {}: {}\n", rank, fatal);
    for (const auto& d : report.drivers)
      if (!d.error.empty() && d.error.rfind("the peer failed", 0) != 0)
        fmt::print(stderr, "pier-perf rank {}: {}: {}\n", rank, d.driver, d.error);
  }
  return failed ? 1 : 0;
}

}  // namespace pier::perf

int main(int argc, char** argv) {
  return pier::perf::main(argc, argv);
}
