// A tiny in-test loopback driver for the fault tests: contexts of one process
// find each other by url, a send copies the bytes into the peer's inbox (at
// most `inbox_limit` packets, then no_resource), and nothing is asynchronous,
// so every observation in a test is exact. Test code: it allocates freely.
#pragma once

#include <pier/driver.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace pier::drivers::fault::testing {

struct LoopOptions {
  bool send_buf = true;
  std::size_t inbox_limit = 64;
  std::size_t buf_bytes = 4096;
};

class LoopInstance;

class LoopContext final : public driver::Context {
 public:
  explicit LoopContext(LoopOptions options = {});
  ~LoopContext() override;
  std::string_view name() const noexcept override { return "loop"; }
  Result<driver::Properties> properties(const driver::Hints& hints) override;
  Result<std::vector<std::byte>> init() override;
  Status close() override;
  Result<std::unique_ptr<driver::Instance>> open_instance(driver::Track track) override;
  Status probe_any(driver::Instance** ready) override;

  const LoopOptions& options() const noexcept { return options_; }
  std::uint64_t id() const noexcept { return id_; }
  void forget(LoopInstance* i);

 private:
  LoopOptions options_;
  std::uint64_t id_ = 0;
  bool closed_ = false;
  std::vector<LoopInstance*> instances_;
};

class LoopInstance final : public driver::Instance {
 public:
  LoopInstance(LoopContext& ctx, driver::Track track) : ctx_(ctx), track_(track) {}
  ~LoopInstance() override;

  Status connect_async(std::span<const std::byte> remote_url) override;
  Status disconnect() override;
  Status send_buf_get(driver::Packet& pkt) override;
  Status send_buf_post(driver::Packet& pkt, std::size_t len) override;
  Status send_post(driver::Packet& pkt) override;
  Status send_poll(driver::Packet& pkt) override;
  Status recv_post(driver::Packet& pkt) override;
  Status recv_poll(driver::Packet& pkt) override;
  Status recv_wait(driver::Packet& pkt, driver::Deadline deadline) override;
  Status recv_cancel(driver::Packet& pkt) override;

  bool has_ready() const noexcept { return !inbox_.empty(); }
  /// Sends the loopback driver saw (the wire, as the peer would see it).
  std::size_t sends_seen() const noexcept { return sends_seen_; }

 private:
  LoopInstance* peer() noexcept;
  Status deliver(const std::byte* bytes, std::size_t len);

  LoopContext& ctx_;
  driver::Track track_;
  std::uint64_t remote_ = 0;
  bool connected_ = false;
  bool broken_ = false;
  LoopInstance* peer_ = nullptr;
  std::deque<std::vector<std::byte>> inbox_;
  driver::Packet* posted_ = nullptr;
  std::vector<std::byte> send_buf_;
  bool send_buf_out_ = false;
  std::size_t sends_seen_ = 0;
};

}  // namespace pier::drivers::fault::testing
