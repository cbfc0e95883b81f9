// pier::boot: the pier-run protocol, spoken over a Unix stream socket between
// pier-run (the server) and each rank's Bootstrap (the client). Shared by both
// sides so that there is exactly one encoder and one decoder. The byte layout
// is documented in docs/launching.md; change both in the same commit.
//
// Every frame starts with an 8-byte header:
//   u32 body_len (LE) | u8 version | u8 type | u16 reserved (zero)
// followed by body_len bytes. The first five bytes (length and version) keep
// this meaning in every future version, so a peer speaking another version is
// recognised and answered with an error frame instead of being misparsed.
#pragma once

#include <pier/result.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pier::boot::proto {

inline constexpr std::uint8_t version = 2;
inline constexpr std::size_t header_size = 8;
/// A frame larger than this is malformed (the whole job's exchange fits).
inline constexpr std::uint32_t max_body = 64u << 20;
inline constexpr std::size_t max_key = 255;
/// Entries one commit may carry: a frame of tiny entries within max_body
/// would cost the launcher some 30 times its size once decoded and stored.
inline constexpr std::uint32_t max_commit_entries = 1u << 14;
inline constexpr std::size_t max_value = 1u << 20;
inline constexpr std::size_t max_text = 4096;
inline constexpr std::size_t max_session = 64;
/// Sessions one pier-run job keeps at most (each holds a slot per rank).
inline constexpr std::size_t max_sessions = 16;
/// A session name: at most max_session bytes of [a-z0-9_.-] (it becomes part
/// of PMIx and PMI keys, where a '/' could make two sessions' keys meet).
bool valid_session(std::string_view name) noexcept;

enum class Type : std::uint8_t {
  hello = 1,         ///< client: rank, size, pid, library version, session
  welcome = 2,       ///< server: the hello is accepted
  error = 3,         ///< server: fatal refusal and why; the server then closes
  commit = 4,        ///< client: entries put since the last commit
  fence = 5,         ///< client: joins fence `epoch`
  fence_done = 6,    ///< server: every rank joined; all entries of the epoch
  fence_failed = 7,  ///< server: the fence can never complete; text says why
  query = 8,         ///< client: who is the fence waiting for?
  query_reply = 9,   ///< server: the missing ranks, as a list and as text
};

/// Why the server refused a client (the first field of an error frame).
enum class Refusal : std::uint8_t {
  version_mismatch = 1,  ///< another protocol or library version
  bad_hello = 2,         ///< rank out of range, duplicate rank, wrong size
  malformed = 3,         ///< a frame that does not decode
};

struct Header {
  std::uint32_t body_len;
  std::uint8_t version;
  Type type;
};

struct Hello {
  std::uint32_t rank;
  std::uint32_t size;
  std::uint32_t pid;
  std::string library_version;
  /// The exchange this connection joins: one process may open several
  /// (Portals and ports side by side), each fenced on its own. "" is the
  /// default one.
  std::string session;
};

struct Entry {
  std::uint32_t rank;  ///< ignored in commit (the server knows the sender)
  std::string key;
  std::vector<std::byte> value;
};

struct FenceDone {
  std::uint32_t epoch;
  std::vector<Entry> entries;
};

/// fence_failed and query_reply: an epoch, the ranks concerned and a text.
struct Report {
  std::uint32_t epoch;
  std::vector<std::uint32_t> ranks;
  std::string text;
};

struct Frame {
  Header header;
  std::vector<std::byte> body;
};

// --- encoding: each returns a complete frame -------------------------------
std::vector<std::byte> encode_hello(const Hello& hello);
std::vector<std::byte> encode_welcome();
std::vector<std::byte> encode_error(Refusal why, std::string_view text);
std::vector<std::byte> encode_commit(std::span<const Entry> entries);
std::vector<std::byte> encode_fence(std::uint32_t epoch);
std::vector<std::byte> encode_fence_done(const FenceDone& done);
std::vector<std::byte> encode_fence_failed(const Report& report);
std::vector<std::byte> encode_query(std::uint32_t epoch);
std::vector<std::byte> encode_query_reply(const Report& report);

// --- decoding: bodies of frames whose version is `version` ------------------
// Each trusts no length and rejects trailing bytes (malformed).
Result<Header> decode_header(std::span<const std::byte> bytes);
Result<Hello> decode_hello(std::span<const std::byte> body);
struct Error {
  Refusal why;
  std::string text;
};
Result<Error> decode_error(std::span<const std::byte> body);
Result<std::vector<Entry>> decode_commit(std::span<const std::byte> body);
Result<std::uint32_t> decode_fence(std::span<const std::byte> body);
Result<FenceDone> decode_fence_done(std::span<const std::byte> body);
Result<Report> decode_fence_failed(std::span<const std::byte> body);
Result<std::uint32_t> decode_query(std::span<const std::byte> body);
Result<Report> decode_query_reply(std::span<const std::byte> body);

/// Reassembles frames from a byte stream. A frame of another version is
/// returned too (its body is unread): the caller answers with an error.
class FrameReader {
 public:
  void append(std::span<const std::byte> bytes);
  /// The next complete frame, nullopt when more bytes are needed, or
  /// malformed (the stream cannot be trusted any more).
  Result<std::optional<Frame>> next();
  bool empty() const noexcept { return buffer_.size() == consumed_; }

 private:
  std::vector<std::byte> buffer_;
  std::size_t consumed_ = 0;
};

/// "1, 3, 4-7": a compact list of ranks for messages.
std::string format_ranks(std::span<const std::uint32_t> ranks);

}  // namespace pier::boot::proto
