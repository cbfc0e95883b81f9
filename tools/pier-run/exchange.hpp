// pier-run: the server side of the bootstrap exchange (src/boot/proto.hpp).
// Pure state: it is fed decoded events and answers with frames to send, so
// the socket loop stays small and the rules live in one place.
#pragma once

#include "boot/proto.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace pier::run {

/// A frame for a connection; `close_after` ends the connection once sent.
/// A frame for one connection. Shared: the fence's answer, up to 64 MiB,
/// goes to every rank as one buffer, not one copy each.
using SharedFrame = std::shared_ptr<const std::vector<std::byte>>;
inline SharedFrame share(std::vector<std::byte> bytes) {
  return std::make_shared<const std::vector<std::byte>>(std::move(bytes));
}
struct Outgoing {
  int conn;
  SharedFrame frame;
  bool close_after = false;
};

class Exchange {
 public:
  Exchange(std::uint32_t size, std::string library_version);
  // Members point into sessions_: a copy would point into the original.
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  /// Bytes arrived as one complete frame on `conn`.
  void on_frame(int conn, const boot::proto::Frame& frame, std::vector<Outgoing>& out);
  /// The connection closed (rank exited or dropped the exchange).
  void on_disconnect(int conn, std::vector<Outgoing>& out);
  /// The launcher saw the rank's process end; it can never join a fence.
  void on_rank_exit(std::uint32_t rank, std::vector<Outgoing>& out);

  /// "fence 2 waits for rank 1 (never connected)", or "" when no fence is
  /// pending; for the launcher's timeout message. One clause per session
  /// with a fence pending ("session 'port' fence 1 ...; ...").
  std::string pending_summary() const;
  /// Refusals written to pier-run's stderr (version mismatch and the like).
  std::vector<std::string> take_notes() { return std::move(notes_); }
  /// Whether the process behind `conn` may say hello as `rank` (the
  /// launcher checks it was started as that rank); unset: any may.
  using IdentityCheck = std::function<bool(int conn, std::uint32_t rank)>;
  void set_identity_check(IdentityCheck check) { identity_check_ = std::move(check); }

 private:
  struct RankState {
    int conn = -1;  ///< -1 when not connected
    bool ever_connected = false;
    bool gone = false;  ///< disconnected or exited: it will never fence again
    std::uint32_t pid = 0;
    std::uint32_t fenced = 0;  ///< last epoch this rank joined
  };
  /// One exchange (boot::proto::Hello::session): every rank's connection of
  /// that name, fenced together and apart from the other sessions.
  struct Session {
    std::string name;
    std::vector<RankState> ranks;
    std::uint32_t epoch = 1;                  ///< the fence being gathered
    std::vector<boot::proto::Entry> entries;  ///< committed during epoch
    /// Where each (rank, key) of the epoch sits in `entries`: a key put
    /// again replaces its value (the last put wins), never piles up.
    std::map<std::pair<std::uint32_t, std::string>, std::size_t> where;
    std::size_t body = 8;  ///< the fence_done body these entries make
    bool failed = false;   ///< a fence failed: every later fence fails
    std::string failure;
  };
  /// What a connection said hello as.
  struct Member {
    Session* session;
    std::uint32_t rank;
  };

  IdentityCheck identity_check_;
  void refuse(int conn, boot::proto::Refusal why, std::string text, std::vector<Outgoing>& out);
  void commit(Session& s, std::uint32_t rank, std::vector<boot::proto::Entry>& entries,
              std::vector<Outgoing>& out);
  /// Ends the session: every rank in it is told `why` (kept for later fences).
  void fail(Session& s, std::string why, std::vector<Outgoing>& out);
  void on_hello(int conn, const boot::proto::Hello& hello, std::vector<Outgoing>& out);
  void on_fence(Session& s, std::uint32_t rank, std::uint32_t epoch, std::vector<Outgoing>& out);
  void maybe_complete(Session& s, std::vector<Outgoing>& out);
  void fail_if_hopeless(Session& s, std::vector<Outgoing>& out);
  static std::vector<std::uint32_t> missing(const Session& s);
  static std::string describe_missing(const Session& s);
  Session& session(const std::string& name);

  std::uint32_t size_;
  std::string library_version_;  ///< pier-run's own build
  std::string first_version_;    ///< of the first rank to say hello
  std::uint32_t first_rank_ = 0;
  std::map<std::string, Session> sessions_;  ///< node-based: members point into it
  std::map<int, Member> members_;            ///< by connection
  std::vector<bool> exited_;                 ///< ranks whose process ended
  std::vector<std::string> notes_;
};

}  // namespace pier::run
