// pier-run: the server side of the bootstrap exchange.
#include "exchange.hpp"

#include <fmt/format.h>

namespace pier::run {

namespace proto = boot::proto;

Exchange::Exchange(std::uint32_t size, std::string library_version)
    : size_(size), library_version_(std::move(library_version)), ranks_(size) {}

int Exchange::rank_of(int conn) const {
  for (std::size_t r = 0; r < ranks_.size(); ++r)
    if (ranks_[r].conn == conn) return static_cast<int>(r);
  return -1;
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
  const int rank = rank_of(conn);
  if (frame.header.type == proto::Type::hello) {
    auto hello = proto::decode_hello(frame.body);
    if (rank >= 0 || !hello) {
      refuse(conn, proto::Refusal::malformed, "malformed or repeated hello", out);
      return;
    }
    on_hello(conn, *hello, out);
    return;
  }
  if (rank < 0) {
    refuse(conn, proto::Refusal::malformed, "a frame before the hello", out);
    return;
  }
  const auto r = static_cast<std::uint32_t>(rank);
  switch (frame.header.type) {
    case proto::Type::commit: {
      auto entries = proto::decode_commit(frame.body);
      if (!entries) break;
      for (auto& e : *entries) entries_.push_back({r, std::move(e.key), std::move(e.value)});
      return;
    }
    case proto::Type::fence: {
      auto epoch = proto::decode_fence(frame.body);
      if (!epoch) break;
      on_fence(r, *epoch, out);
      return;
    }
    case proto::Type::query: {
      auto epoch = proto::decode_query(frame.body);
      if (!epoch) break;
      proto::Report report{*epoch, {}, {}};
      if (*epoch == epoch_) {
        report.ranks = missing();
        report.text = failed_ ? failure_ : describe_missing();
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
  RankState& state = ranks_[hello.rank];
  if (state.ever_connected) {
    refuse(
        conn, proto::Refusal::bad_hello,
        fmt::format("rank {} connected twice (pids {} and {})", hello.rank, state.pid, hello.pid),
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
  state.conn = conn;
  state.ever_connected = true;
  state.pid = hello.pid;
  out.push_back({conn, share(proto::encode_welcome())});
}

void Exchange::on_fence(std::uint32_t rank, std::uint32_t epoch, std::vector<Outgoing>& out) {
  RankState& state = ranks_[rank];
  if (failed_) {
    out.push_back({state.conn, share(proto::encode_fence_failed({epoch, {}, failure_}))});
    return;
  }
  if (epoch != epoch_ || state.fenced == epoch) {
    refuse(state.conn, proto::Refusal::malformed,
           fmt::format("rank {} entered fence {} while fence {} is gathered", rank, epoch, epoch_),
           out);
    return;
  }
  state.fenced = epoch;
  fail_if_hopeless(out);
  if (!failed_) maybe_complete(out);
}

void Exchange::maybe_complete(std::vector<Outgoing>& out) {
  for (const auto& r : ranks_)
    if (r.fenced != epoch_) return;
  // One encoding for everyone: each rank receives every entry of the epoch,
  // its own included, so get() never needs another round trip.
  const SharedFrame frame = share(proto::encode_fence_done({epoch_, std::move(entries_)}));
  entries_.clear();
  if (frame->size() > proto::header_size + proto::max_body) {
    failed_ = true;
    // Every rank would refuse the answer as malformed: say why instead.
    failure_ = fmt::format(
        "fence {}: the ranks put {} MiB of keys and values, more than one exchange carries "
        "({} MiB)",
        epoch_, (frame->size() - proto::header_size) >> 20, proto::max_body >> 20);
    notes_.push_back(failure_);
    for (const auto& r : ranks_)
      if (r.conn >= 0)
        out.push_back({r.conn, share(proto::encode_fence_failed({epoch_, {}, failure_}))});
    return;
  }
  for (const auto& r : ranks_)
    if (r.conn >= 0) out.push_back({r.conn, frame});
  ++epoch_;
}

void Exchange::fail_if_hopeless(std::vector<Outgoing>& out) {
  if (failed_) return;
  bool someone_waits = false;
  std::vector<std::uint32_t> lost;
  for (std::uint32_t r = 0; r < size_; ++r) {
    if (ranks_[r].fenced == epoch_) someone_waits = true;
    if (ranks_[r].gone && ranks_[r].fenced != epoch_) lost.push_back(r);
  }
  if (!someone_waits || lost.empty()) return;
  failed_ = true;
  failure_ = fmt::format("{} {} ended before joining fence {}", lost.size() == 1 ? "rank" : "ranks",
                         proto::format_ranks(lost), epoch_);
  notes_.push_back(failure_);
  for (const auto& r : ranks_)
    if (r.conn >= 0 && r.fenced == epoch_)
      out.push_back({r.conn, share(proto::encode_fence_failed({epoch_, lost, failure_}))});
}

void Exchange::on_disconnect(int conn, std::vector<Outgoing>& out) {
  const int rank = rank_of(conn);
  if (rank < 0) return;
  ranks_[static_cast<std::size_t>(rank)].conn = -1;
  ranks_[static_cast<std::size_t>(rank)].gone = true;
  fail_if_hopeless(out);
}

void Exchange::on_rank_exit(std::uint32_t rank, std::vector<Outgoing>& out) {
  if (rank >= size_) return;
  ranks_[rank].gone = true;
  fail_if_hopeless(out);
}

std::vector<std::uint32_t> Exchange::missing() const {
  std::vector<std::uint32_t> out;
  for (std::uint32_t r = 0; r < size_; ++r)
    if (ranks_[r].fenced != epoch_) out.push_back(r);
  return out;
}

std::string Exchange::describe_missing() const {
  std::vector<std::uint32_t> never, outside, gone;
  for (std::uint32_t r : missing()) {
    const RankState& s = ranks_[r];
    (!s.ever_connected ? never : s.gone ? gone : outside).push_back(r);
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
  for (const auto& r : ranks_)
    if (r.fenced == epoch_) return fmt::format("fence {} {}", epoch_, describe_missing());
  return {};
}

}  // namespace pier::run
