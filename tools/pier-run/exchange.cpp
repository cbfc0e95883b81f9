// pier-run: the server side of the bootstrap exchange.
#include "exchange.hpp"

#include <fmt/format.h>

namespace pier::run {

namespace proto = boot::proto;

Exchange::Exchange(std::uint32_t size, std::string library_version)
    : size_(size), library_version_(std::move(library_version)), exited_(size, false) {}

Exchange::Session& Exchange::session(const std::string& name) {
  auto [it, fresh] = sessions_.try_emplace(name);
  Session& s = it->second;
  if (fresh) {
    s.name = name;
    s.ranks.resize(size_);
    // A rank that already ended can never join this session's fences.
    for (std::uint32_t r = 0; r < size_; ++r) s.ranks[r].gone = exited_[r];
  }
  return s;
}

void Exchange::refuse(int conn, proto::Refusal why, std::string text, std::vector<Outgoing>& out) {
  notes_.push_back(text);
  out.push_back({conn, share(proto::encode_error(why, text)), true});
}

void Exchange::on_frame(int conn, const proto::Frame& frame, std::vector<Outgoing>& out) {
  if (frame.header.version != proto::version) {
    refuse(conn, proto::Refusal::version_mismatch,
           fmt::format("a process speaks boot protocol version {}, this pier-run version {} "
                       "(pier {}): launch it with the pier-run of its own build",
                       frame.header.version, proto::version, library_version_),
           out);
    return;
  }
  auto member = members_.find(conn);
  if (frame.header.type == proto::Type::hello) {
    auto hello = proto::decode_hello(frame.body);
    if (member != members_.end() || !hello) {
      refuse(conn, proto::Refusal::malformed, "malformed or repeated hello", out);
      return;
    }
    on_hello(conn, *hello, out);
    return;
  }
  if (member == members_.end()) {
    refuse(conn, proto::Refusal::malformed, "a frame before the hello", out);
    return;
  }
  Session& ses = *member->second.session;
  const std::uint32_t r = member->second.rank;
  switch (frame.header.type) {
    case proto::Type::commit: {
      auto entries = proto::decode_commit(frame.body);
      if (!entries) break;
      commit(ses, r, *entries, out);
      return;
    }
    case proto::Type::fence: {
      auto epoch = proto::decode_fence(frame.body);
      if (!epoch) break;
      on_fence(ses, r, *epoch, out);
      return;
    }
    case proto::Type::query: {
      auto epoch = proto::decode_query(frame.body);
      if (!epoch) break;
      proto::Report report{*epoch, {}, {}};
      if (*epoch == ses.epoch) {
        report.ranks = missing(ses);
        report.text = ses.failed ? ses.failure : describe_missing(ses);
      }
      out.push_back({conn, share(proto::encode_query_reply(report))});
      return;
    }
    default:
      break;
  }
  refuse(conn, proto::Refusal::malformed,
         fmt::format("rank {} sent a malformed or unexpected frame (type {})", r,
                     static_cast<int>(frame.header.type)),
         out);
}

void Exchange::on_hello(int conn, const proto::Hello& hello, std::vector<Outgoing>& out) {
  if (hello.size != size_ || hello.rank >= size_) {
    refuse(conn, proto::Refusal::bad_hello,
           fmt::format("a process claims rank {} of {}, but this job has {} ranks", hello.rank,
                       hello.size, size_),
           out);
    return;
  }
  if (identity_check_ && !identity_check_(conn, hello.rank)) {
    refuse(conn, proto::Refusal::bad_hello,
           fmt::format("a process (pid {}) that pier-run did not start as rank {} claims it",
                       hello.pid, hello.rank),
           out);
    return;
  }
  // One connection per rank and session.
  if (const auto& existing = sessions_.find(hello.session);
      existing != sessions_.end() && existing->second.ranks[hello.rank].ever_connected) {
    const RankState& was = existing->second.ranks[hello.rank];
    refuse(conn, proto::Refusal::bad_hello,
           hello.session.empty()
               ? fmt::format("rank {} connected twice (pids {} and {})", hello.rank, was.pid,
                             hello.pid)
               : fmt::format("rank {} connected twice to session '{}' (pids {} and {})", hello.rank,
                             hello.session, was.pid, hello.pid),
           out);
    return;
  }
  // Ranks must share one build: driver urls and wire formats are only
  // guaranteed compatible within a version. pier-run itself may differ.
  if (first_version_.empty()) {
    first_version_ = hello.library_version;
    first_rank_ = hello.rank;
  } else if (hello.library_version != first_version_) {
    refuse(conn, proto::Refusal::version_mismatch,
           fmt::format("rank {} (pid {}) runs pier {} but rank {} runs pier {}", hello.rank,
                       hello.pid, hello.library_version, first_rank_, first_version_),
           out);
    return;
  }
  // A bounded number of sessions (each holds a slot per rank).
  if (!sessions_.contains(hello.session) && sessions_.size() >= proto::max_sessions) {
    refuse(conn, proto::Refusal::bad_hello,
           fmt::format("rank {} opens a session '{}' beyond the {} one job may have", hello.rank,
                       hello.session, proto::max_sessions),
           out);
    return;
  }
  Session& ses = session(hello.session);
  RankState& state = ses.ranks[hello.rank];
  state.conn = conn;
  state.ever_connected = true;
  state.pid = hello.pid;
  members_[conn] = {&ses, hello.rank};
  out.push_back({conn, share(proto::encode_welcome())});
}

namespace {
/// What one entry adds to a fence_done body: rank, key, value.
std::size_t encoded_size(const proto::Entry& e) {
  return 4 + 2 + e.key.size() + 4 + e.value.size();
}
}  // namespace

void Exchange::commit(Session& s, std::uint32_t rank, std::vector<proto::Entry>& entries,
                      std::vector<Outgoing>& out) {
  if (s.failed) return;  // nothing of it is ever handed out
  for (auto& e : entries) {
    auto [it, fresh] = s.where.try_emplace({rank, e.key}, s.entries.size());
    if (fresh) {
      s.entries.push_back({rank, std::move(e.key), std::move(e.value)});
      s.body += encoded_size(s.entries.back());
    } else {
      proto::Entry& kept = s.entries[it->second];
      s.body -= kept.value.size();
      s.body += e.value.size();
      kept.value = std::move(e.value);
    }
    if (s.body > proto::max_body) break;  // failed below: store no more of it
  }
  // Refused now, not at the fence: pier-run would otherwise hold every
  // byte until then, and encode them all once more before finding out.
  if (s.body > proto::max_body)
    fail(s,
         fmt::format("{}fence {}: the ranks put over {} MiB of keys and values, more than one "
                     "exchange carries ({} MiB)",
                     s.name.empty() ? std::string() : fmt::format("session '{}': ", s.name),
                     s.epoch, proto::max_body >> 20, proto::max_body >> 20),
         out);
}

void Exchange::fail(Session& s, std::string why, std::vector<Outgoing>& out) {
  s.failed = true;
  s.failure = std::move(why);
  s.entries.clear();
  s.entries.shrink_to_fit();
  s.where.clear();
  s.body = 8;
  notes_.push_back(s.failure);
  for (const auto& r : s.ranks)
    if (r.conn >= 0 && r.fenced == s.epoch)
      out.push_back({r.conn, share(proto::encode_fence_failed({s.epoch, {}, s.failure}))});
}

void Exchange::on_fence(Session& s, std::uint32_t rank, std::uint32_t epoch,
                        std::vector<Outgoing>& out) {
  RankState& state = s.ranks[rank];
  if (s.failed) {
    out.push_back({state.conn, share(proto::encode_fence_failed({epoch, {}, s.failure}))});
    return;
  }
  if (epoch != s.epoch || state.fenced == epoch) {
    refuse(state.conn, proto::Refusal::malformed,
           fmt::format("rank {} entered fence {} while fence {} is gathered", rank, epoch, s.epoch),
           out);
    return;
  }
  state.fenced = epoch;
  fail_if_hopeless(s, out);
  if (!s.failed) maybe_complete(s, out);
}

void Exchange::maybe_complete(Session& s, std::vector<Outgoing>& out) {
  for (const auto& r : s.ranks)
    if (r.fenced != s.epoch) return;
  // One encoding for everyone: each rank receives every entry of the epoch,
  // its own included, so get() never needs another round trip.
  const SharedFrame frame = share(proto::encode_fence_done({s.epoch, std::move(s.entries)}));
  s.entries.clear();
  s.where.clear();
  s.body = 8;
  if (frame->size() > proto::header_size + proto::max_body) {
    s.failed = true;
    // Every rank would refuse the answer as malformed: say why instead.
    s.failure = fmt::format(
        "{}fence {}: the ranks put {} MiB of keys and values, more than one exchange carries "
        "({} MiB)",
        s.name.empty() ? std::string() : fmt::format("session '{}': ", s.name), s.epoch,
        (frame->size() - proto::header_size) >> 20, proto::max_body >> 20);
    notes_.push_back(s.failure);
    for (const auto& r : s.ranks)
      if (r.conn >= 0)
        out.push_back({r.conn, share(proto::encode_fence_failed({s.epoch, {}, s.failure}))});
    return;
  }
  for (const auto& r : s.ranks)
    if (r.conn >= 0) out.push_back({r.conn, frame});
  ++s.epoch;
}

void Exchange::fail_if_hopeless(Session& s, std::vector<Outgoing>& out) {
  if (s.failed) return;
  bool someone_waits = false;
  std::vector<std::uint32_t> lost;
  for (std::uint32_t r = 0; r < size_; ++r) {
    if (s.ranks[r].fenced == s.epoch) someone_waits = true;
    if (s.ranks[r].gone && s.ranks[r].fenced != s.epoch) lost.push_back(r);
  }
  if (!someone_waits || lost.empty()) return;
  s.failed = true;
  s.failure = fmt::format("{} {} ended before joining fence {}",
                          lost.size() == 1 ? "rank" : "ranks", proto::format_ranks(lost), s.epoch);
  if (!s.name.empty()) s.failure = fmt::format("session '{}': {}", s.name, s.failure);
  notes_.push_back(s.failure);
  for (const auto& r : s.ranks)
    if (r.conn >= 0 && r.fenced == s.epoch)
      out.push_back({r.conn, share(proto::encode_fence_failed({s.epoch, lost, s.failure}))});
}

void Exchange::on_disconnect(int conn, std::vector<Outgoing>& out) {
  auto member = members_.find(conn);
  if (member == members_.end()) return;
  Session& s = *member->second.session;
  RankState& state = s.ranks[member->second.rank];
  members_.erase(member);
  state.conn = -1;
  state.gone = true;
  fail_if_hopeless(s, out);
}

void Exchange::on_rank_exit(std::uint32_t rank, std::vector<Outgoing>& out) {
  if (rank >= size_) return;
  exited_[rank] = true;
  for (auto& [name, s] : sessions_) {
    s.ranks[rank].gone = true;
    fail_if_hopeless(s, out);
  }
}

std::vector<std::uint32_t> Exchange::missing(const Session& s) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t r = 0; r < s.ranks.size(); ++r)
    if (s.ranks[r].fenced != s.epoch) out.push_back(r);
  return out;
}

std::string Exchange::describe_missing(const Session& s) {
  std::vector<std::uint32_t> never, outside, gone;
  for (std::uint32_t r : missing(s)) {
    const RankState& st = s.ranks[r];
    (!st.ever_connected ? never : st.gone ? gone : outside).push_back(r);
  }
  std::string text;
  auto add = [&](const std::vector<std::uint32_t>& ranks, std::string_view why) {
    if (ranks.empty()) return;
    if (!text.empty()) text += "; ";
    text += fmt::format("{} {} {}", ranks.size() == 1 ? "rank" : "ranks",
                        proto::format_ranks(ranks), why);
  };
  add(never, "never connected to the exchange");
  add(outside, "connected but did not enter the fence");
  add(gone, "left the exchange");
  return text.empty() ? text : "waiting for " + text;
}

std::string Exchange::pending_summary() const {
  std::string text;
  for (const auto& [name, s] : sessions_) {
    bool pending = false;
    for (const auto& r : s.ranks) pending = pending || r.fenced == s.epoch;
    if (!pending) continue;
    if (!text.empty()) text += "; ";
    text += name.empty()
                ? fmt::format("fence {} {}", s.epoch, describe_missing(s))
                : fmt::format("session '{}' fence {} {}", name, s.epoch, describe_missing(s));
  }
  return text;
}

}  // namespace pier::run
