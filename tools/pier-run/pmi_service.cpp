// pier-run: PMI-1 / PMI-2 request handling (see pmi_service.hpp). Answers
// follow hydra's spelling, since MPICH's simple clients check the command
// names and the rc, found and value fields.
#include "pmi_service.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

namespace pier::run {
namespace {

using boot::pmi::Command;
using boot::pmi::Framing;

constexpr std::size_t max_key = 256;  // PMI-1 advertises 64; PMI-2 clients may use more

Command make(std::string name) {
  Command c;
  c.name = std::move(name);
  return c;
}

std::string get_or(const Command& c, std::string_view key, std::string fallback = {}) {
  const std::string* v = c.find(key);
  return v ? *v : fallback;
}

/// PMI-2 answers echo the client's thread id when it sent one.
Command v2_answer(const Command& request, std::string name) {
  Command c = make(std::move(name));
  if (const std::string* thrid = request.find("thrid")) c.add("thrid", *thrid);
  return c;
}

}  // namespace

PmiService::PmiService(std::uint32_t size, std::string jobid)
    : size_(size), jobid_(std::move(jobid)), ranks_(size) {
  // Every rank on one node: block (0, 1 node, size ranks per node).
  const std::string mapping = fmt::format("(vector,(0,1,{}))", size);
  kvs_["PMI_process_mapping"] = mapping;
  kvs_bytes_ += mapping.size();
}

void PmiService::reply(std::uint32_t rank, Framing framing, const Command& c,
                       std::vector<PmiOutgoing>& out, bool close_after) {
  auto bytes = framing == Framing::v1 ? boot::pmi::format_v1(c) : boot::pmi::format_v2(c);
  if (!bytes) {
    // Only a value a PMI-1 line cannot carry (a space put through PMI-2 and
    // read through PMI-1) gets here.
    notes_.push_back(fmt::format("rank {}: cannot encode the PMI answer '{}' in PMI-{}", rank,
                                 c.name, framing == Framing::v1 ? 1 : 2));
    out.push_back({rank, {}, true});
    return;
  }
  out.push_back({rank, std::move(*bytes), close_after});
}

void PmiService::on_message(std::uint32_t rank, const boot::pmi::Message& message,
                            Clock::time_point now, std::vector<PmiOutgoing>& out) {
  now_ = now;
  if (rank >= size_ || ranks_[rank].gone || ranks_[rank].aborted) return;
  auto command = message.framing == Framing::v1 ? boot::pmi::parse_v1(message.text)
                                                : boot::pmi::parse_v2(message.text);
  if (!command) {
    notes_.push_back(fmt::format("rank {}: malformed PMI-{} message, closing its PMI connection",
                                 rank, message.framing == Framing::v1 ? 1 : 2));
    out.push_back({rank, {}, true});
    leave(rank, "sent a malformed PMI message", out);
    return;
  }
  if (message.framing == Framing::v1)
    on_v1(rank, *command, out);
  else
    on_v2(rank, *command, out);
}

bool PmiService::store(std::map<std::string, std::string>& space, const std::string& key,
                       const std::string& value) {
  auto it = space.find(key);
  const std::size_t old = it == space.end() ? 0 : kvs_entry_cost + key.size() + it->second.size();
  const std::size_t now = kvs_entry_cost + key.size() + value.size();
  if (kvs_bytes_ - old + now > max_kvs_bytes) return false;
  kvs_bytes_ = kvs_bytes_ - old + now;
  space[key] = value;
  return true;
}

void PmiService::on_v1(std::uint32_t rank, const Command& c, std::vector<PmiOutgoing>& out) {
  const Framing v1 = Framing::v1;
  const std::string& n = c.name;
  if (n == "init") {
    const std::string version = get_or(c, "pmi_version", "1");
    const bool ok = version == "1" || version == "2";
    Command a = make("response_to_init");
    a.add("pmi_version", ok ? version : "2")
        .add("pmi_subversion", version == "2" ? "0" : "1")
        .add("rc", ok ? "0" : "-1");
    reply(rank, v1, a, out);
  } else if (n == "get_maxes") {
    reply(rank, v1,
          make("maxes")
              .add("rc", "0")
              .add("kvsname_max", "256")
              .add("keylen_max", "64")
              .add("vallen_max", "1024"),
          out);
  } else if (n == "get_appnum") {
    reply(rank, v1, make("appnum").add("rc", "0").add("appnum", "0"), out);
  } else if (n == "get_my_kvsname") {
    reply(rank, v1, make("my_kvsname").add("rc", "0").add("kvsname", jobid_), out);
  } else if (n == "get_universe_size") {
    reply(rank, v1, make("universe_size").add("rc", "0").add("size", std::to_string(size_)), out);
  } else if (n == "barrier_in") {
    enter_barrier(rank, v1, {}, out);
  } else if (n == "put" || n == "get") {
    const std::string kvsname = get_or(c, "kvsname");
    const std::string key = get_or(c, "key");
    Command a = make(n == "put" ? "put_result" : "get_result");
    if (kvsname != jobid_) {
      a.add("rc", "-1").add("msg", "unknown_kvsname_" + kvsname);
    } else if (key.empty() || key.size() > max_key) {
      a.add("rc", "-1").add("msg", "invalid_key");
    } else if (n == "put") {
      const bool stored = store(kvs_, key, get_or(c, "value"));
      a.add("rc", stored ? "0" : "-1").add("msg", stored ? "success" : "kvs_full");
    } else if (auto it = kvs_.find(key); it != kvs_.end()) {
      a.add("rc", "0").add("msg", "success").add("value", it->second);
    } else {
      a.add("rc", "-1").add("msg", "key_" + key + "_not_found");
    }
    reply(rank, v1, a, out);
  } else if (n == "finalize") {
    reply(rank, v1, make("finalize_ack").add("rc", "0"), out);
    ranks_[rank].finalized = true;
    leave(rank, "finalized", out);
  } else if (n == "abort") {
    abort_from(rank, c);
  } else if (n == "publish_name" || n == "unpublish_name" || n == "lookup_name") {
    const std::string service = get_or(c, "service");
    Command a = make(n.substr(0, n.find('_')) + "_result");
    const NameAnswer r = on_name(n.substr(0, n.find('_')), service, get_or(c, "port"));
    a.add("rc", r.ok ? "0" : "-1");
    // PMI-1 values hold no spaces: hydra's underscores.
    std::string msg = r.ok ? "success" : r.error;
    std::replace(msg.begin(), msg.end(), ' ', '_');
    a.add("msg", msg);
    if (r.ok && !r.port.empty()) a.add("port", r.port).add("value", r.port);
    reply(rank, v1, a, out);
  } else if (n == "spawn") {
    // One answer after the last block of a PMI_Spawn_multiple.
    const std::string total = get_or(c, "totspawns", "1");
    if (get_or(c, "spawnssofar", total) != total) return;
    reply(rank, v1,
          make("spawn_result").add("rc", "-1").add("msg", "spawn_is_not_supported_by_pier-run"),
          out);
    note_spawn(rank, get_or(c, "execname"), get_or(c, "nprocs"));
  } else {
    notes_.push_back(fmt::format("rank {}: unsupported PMI-1 command '{}'", rank, n));
    reply(rank, v1, make(n + "_result").add("rc", "-1").add("msg", "unsupported_command"), out);
  }
}

void PmiService::on_v2(std::uint32_t rank, const Command& c, std::vector<PmiOutgoing>& out) {
  const Framing v2 = Framing::v2;
  const std::string& n = c.name;
  if (n == "fullinit") {
    Command a = v2_answer(c, "fullinit-response");
    const std::string claimed = get_or(c, "pmirank", std::to_string(rank));
    if (claimed != std::to_string(rank)) {
      a.add("rc", "-1")
          .add("errmsg", fmt::format("pmirank {} is not this connection's rank {}", claimed, rank));
    } else {
      a.add("pmi-version", "2")
          .add("pmi-subversion", "0")
          .add("rank", std::to_string(rank))
          .add("size", std::to_string(size_))
          .add("appnum", "0")
          .add("debugged", "FALSE")
          .add("pmiverbose", "FALSE")
          .add("rc", "0");
    }
    reply(rank, v2, a, out);
  } else if (n == "job-getid") {
    reply(rank, v2, v2_answer(c, "job-getid-response").add("jobid", jobid_).add("rc", "0"), out);
  } else if (n == "kvs-put") {
    const std::string key = get_or(c, "key");
    Command a = v2_answer(c, "kvs-put-response");
    if (key.empty() || key.size() > max_key)
      a.add("rc", "-1").add("errmsg", "invalid key");
    else if (!store(kvs_, key, get_or(c, "value")))
      a.add("rc", "-1").add("errmsg", "key-value space full");
    else
      a.add("rc", "0");
    reply(rank, v2, a, out);
  } else if (n == "kvs-fence") {
    enter_barrier(rank, v2, get_or(c, "thrid"), out);
  } else if (n == "kvs-get" || n == "info-getjobattr") {
    const std::string key = get_or(c, "key");
    const std::string jobid = get_or(c, "jobid", jobid_);
    Command a = v2_answer(c, n + "-response");
    auto it = kvs_.find(key);
    if (n == "info-getjobattr" && key == "universeSize") {
      a.add("found", "TRUE").add("value", std::to_string(size_));
    } else if ((jobid.empty() || jobid == jobid_) && it != kvs_.end() &&
               (n == "kvs-get" || key == "PMI_process_mapping")) {
      a.add("found", "TRUE").add("value", it->second);
    } else {
      a.add("found", "FALSE");
    }
    reply(rank, v2, a.add("rc", "0"), out);
  } else if (n == "info-putnodeattr") {
    const std::string key = get_or(c, "key");
    const std::string value = get_or(c, "value");
    Command a = v2_answer(c, "info-putnodeattr-response");
    const bool stored = !key.empty() && key.size() <= max_key && store(node_, key, value);
    a.add("rc", stored ? "0" : "-1");
    if (!stored) a.add("errmsg", "invalid key or key-value space full");
    reply(rank, v2, a, out);
    if (!stored) return;
    // Answer the ranks that wait for this attribute.
    for (auto it = node_waits_.begin(); it != node_waits_.end();) {
      if (it->key != key) {
        ++it;
        continue;
      }
      Command w = make("info-getnodeattr-response");
      if (!it->thrid.empty()) w.add("thrid", it->thrid);
      reply(it->rank, v2, w.add("found", "TRUE").add("value", value).add("rc", "0"), out);
      it = node_waits_.erase(it);
    }
  } else if (n == "info-getnodeattr") {
    const std::string key = get_or(c, "key");
    if (auto it = node_.find(key); it != node_.end()) {
      reply(rank, v2,
            v2_answer(c, "info-getnodeattr-response")
                .add("found", "TRUE")
                .add("value", it->second)
                .add("rc", "0"),
            out);
    } else if (get_or(c, "wait") == "TRUE") {
      const auto pending = std::count_if(node_waits_.begin(), node_waits_.end(),
                                         [rank](const NodeWait& w) { return w.rank == rank; });
      if (static_cast<std::size_t>(pending) < max_node_waits_per_rank) {
        node_waits_.push_back({rank, key, get_or(c, "thrid")});
      } else {
        reply(rank, v2,
              v2_answer(c, "info-getnodeattr-response")
                  .add("found", "FALSE")
                  .add("rc", "-1")
                  .add("errmsg", "too many node attribute waits pending"),
              out);
      }
    } else {
      reply(rank, v2,
            v2_answer(c, "info-getnodeattr-response").add("found", "FALSE").add("rc", "0"), out);
    }
  } else if (n == "finalize") {
    reply(rank, v2, v2_answer(c, "finalize-response").add("rc", "0"), out);
    ranks_[rank].finalized = true;
    leave(rank, "finalized", out);
  } else if (n == "abort") {
    abort_from(rank, c);
  } else if (n == "name-publish" || n == "name-unpublish" || n == "name-lookup") {
    const std::string op = n.substr(5);
    const NameAnswer r = on_name(op, get_or(c, "name"), get_or(c, "port"));
    Command a = v2_answer(c, n + "-response");
    if (op == "lookup") a.add("found", r.ok ? "TRUE" : "FALSE");
    if (r.ok && !r.port.empty()) a.add("port", r.port).add("value", r.port);
    a.add("rc", r.ok ? "0" : "-1");
    if (!r.ok) a.add("errmsg", r.error);
    reply(rank, v2, a, out);
  } else if (n == "spawn") {
    reply(rank, v2,
          v2_answer(c, "spawn-response")
              .add("rc", "-1")
              .add("errmsg", "spawn is not supported by pier-run: start every process with -n"),
          out);
    note_spawn(rank, get_or(c, "subcmd"), get_or(c, "maxprocs"));
  } else {
    notes_.push_back(fmt::format("rank {}: unsupported PMI-2 command '{}'", rank, n));
    reply(rank, v2,
          v2_answer(c, n + "-response").add("rc", "-1").add("errmsg", "unsupported command"), out);
  }
}

PmiService::NameAnswer PmiService::on_name(const std::string& op, const std::string& service,
                                           const std::string& port) {
  // MPI_Publish_name and friends: one name space per job, first come first
  // served; a lookup does not wait for a publish (MPI leaves that to users).
  if (service.empty() || service.size() > max_key) return {false, "invalid service name", {}};
  auto it = names_.find(service);
  if (op == "publish") {
    if (it != names_.end()) return {false, "service " + service + " is already published", {}};
    if (port.empty()) return {false, "no port to publish", {}};
    if (!store(names_, service, port)) return {false, "key-value space full", {}};
    return {true, {}, {}};
  }
  if (it == names_.end()) return {false, "service " + service + " is not published", {}};
  if (op == "lookup") return {true, {}, it->second};
  kvs_bytes_ -= it->first.size() + it->second.size();
  names_.erase(it);
  return {true, {}, {}};
}

void PmiService::note_spawn(std::uint32_t rank, const std::string& program,
                            const std::string& count) {
  notes_.push_back(fmt::format(
      "rank {} asked PMI to spawn {}{}{}: pier-run does not spawn (start every process with "
      "-n); the request was refused",
      rank, count.empty() ? "processes" : count + " processes", program.empty() ? "" : " of ",
      program));
}

void PmiService::abort_from(std::uint32_t rank, const Command& c) {
  // The client exits right after sending abort; pier-run then ends the job
  // through the rank's exit status, as for any failing rank.
  std::string text = get_or(c, "msg", get_or(c, "message"));
  // Its socket closing must not fail the others' barrier: they would exit
  // with their own status first and hide the abort's exit code.
  ranks_[rank].aborted = true;
  // The code as MPI_Abort gave it; 1 when it is missing or not a number.
  int code = 1;
  if (const std::string* v = c.find("exitcode")) {
    int parsed = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), parsed);
    if (ec == std::errc{} && end == v->data() + v->size() && parsed >= 0 && parsed <= 255)
      code = parsed;
  }
  aborts_.push_back(code);
  notes_.push_back(fmt::format("rank {} aborted the job through PMI{}{}", rank,
                               c.find("exitcode") ? " (exit code " + *c.find("exitcode") + ")" : "",
                               text.empty() ? "" : ": " + text));
}

void PmiService::enter_barrier(std::uint32_t rank, Framing framing, std::string thrid,
                               std::vector<PmiOutgoing>& out) {
  RankState& r = ranks_[rank];
  if (!barrier_failure_.empty()) {
    notes_.push_back(fmt::format("rank {}: PMI barrier refused: {}", rank, barrier_failure_));
    out.push_back({rank, {}, true});
    return;
  }
  r.waiting = true;
  r.barrier_framing = framing;
  r.barrier_thrid = std::move(thrid);
  for (const RankState& s : ranks_) {
    if (!s.waiting) {
      check_barrier(out);
      return;
    }
  }
  for (std::uint32_t i = 0; i < size_; ++i) {
    RankState& s = ranks_[i];
    s.waiting = false;
    Command a = make(s.barrier_framing == Framing::v1 ? "barrier_out" : "kvs-fence-response");
    if (!s.barrier_thrid.empty()) a.add("thrid", s.barrier_thrid);
    reply(i, s.barrier_framing, a.add("rc", "0"), out);
  }
  ++barrier_epoch_;
}

void PmiService::leave(std::uint32_t rank, std::string why, std::vector<PmiOutgoing>& out) {
  RankState& r = ranks_[rank];
  if (r.gone || r.aborted) return;
  r.gone = true;
  r.waiting = false;
  r.left_why = std::move(why);
  r.left_at = now_;
  std::erase_if(node_waits_, [rank](const NodeWait& w) { return w.rank == rank; });
  check_barrier(out);
}

std::optional<PmiService::Clock::time_point> PmiService::next_tick() const noexcept {
  if (!barrier_failure_.empty()) return std::nullopt;
  bool pending = false;
  std::optional<Clock::time_point> first_gone;
  for (const RankState& s : ranks_) {
    pending |= s.waiting;
    if (s.gone && (!first_gone || s.left_at < *first_gone)) first_gone = s.left_at;
  }
  if (!pending || !first_gone) return std::nullopt;
  return *first_gone + leave_grace;
}

void PmiService::check_barrier(std::vector<PmiOutgoing>& out) {
  const auto due = next_tick();
  if (!due || now_ < *due) return;
  std::uint32_t first = 0;
  for (std::uint32_t i = 0; i < size_; ++i)
    if (ranks_[i].gone && (!ranks_[first].gone || ranks_[i].left_at < ranks_[first].left_at))
      first = i;
  barrier_failure_ = fmt::format("rank {} {} before entering PMI barrier {}", first,
                                 ranks_[first].left_why, barrier_epoch_);
  fail_barrier(out);
}

void PmiService::on_tick(Clock::time_point now, std::vector<PmiOutgoing>& out) {
  now_ = now;
  check_barrier(out);
}

void PmiService::on_disconnect(std::uint32_t rank, Clock::time_point now,
                               std::vector<PmiOutgoing>& out) {
  now_ = now;
  if (rank >= size_) return;
  leave(rank, "closed its PMI connection", out);
}

void PmiService::fail_barrier(std::vector<PmiOutgoing>& out) {
  std::vector<std::uint32_t> waiting;
  for (std::uint32_t i = 0; i < size_; ++i)
    if (ranks_[i].waiting) waiting.push_back(i);
  notes_.push_back(fmt::format("PMI barrier {} failed: {}; closing the PMI connection of {} {}",
                               barrier_epoch_, barrier_failure_,
                               waiting.size() == 1 ? "rank" : "ranks", fmt::join(waiting, ", ")));
  for (std::uint32_t i : waiting) {
    ranks_[i].waiting = false;
    out.push_back({i, {}, true});
  }
}

}  // namespace pier::run
