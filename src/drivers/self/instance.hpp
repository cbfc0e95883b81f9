// pier self driver: one end of a connection (one gate and track).
#pragma once

#include <pier/driver.hpp>

#include <memory>

#include "drivers/self/context.hpp"
#include "drivers/self/pipe.hpp"

namespace pier::drivers::self {

class SelfInstance final : public pier::driver::Instance {
 public:
  SelfInstance(std::shared_ptr<ContextCore> ctx, Track track);
  ~SelfInstance() override;

  Status connect_async(std::span<const std::byte> remote_url) override;
  Status connect_wait(pier::driver::Deadline deadline) override;
  Status disconnect() override;

  Status send_buf_get(Packet& pkt) override;
  Status send_buf_post(Packet& pkt, std::size_t len) override;
  Status send_post(Packet& pkt) override;
  Status send_poll(Packet& pkt) override;
  Status send_wait(Packet& pkt, pier::driver::Deadline deadline) override;
  Status send_prefetch(Packet& pkt) override;
  Status send_unfetch(Packet& pkt) override;

  Status recv_post(Packet& pkt) override;
  Status recv_poll(Packet& pkt) override;
  Status recv_buf_release(Packet& pkt) override;
  Status recv_wait(Packet& pkt, pier::driver::Deadline deadline) override;
  Status recv_cancel(Packet& pkt) override;
  Status recv_prefetch(Packet& pkt) override;
  Status recv_unfetch(Packet& pkt) override;

  /// For probe_any(): a small-track packet waits here, unclaimed.
  bool has_ready() noexcept;

 private:
  /// Whether packets may move now: ok, closed or broken. Under the pipe lock.
  Status link_status() const noexcept;
  Status send_poll_locked(Packet& pkt) noexcept;
  Status recv_poll_locked(Packet& pkt) noexcept;
  /// What a call needing a connection answers before connect_async().
  Status unconnected() const noexcept;
  Direction& out() noexcept { return pipe_->dir[side_]; }
  Direction& in() noexcept { return pipe_->dir[peer_]; }

  std::shared_ptr<ContextCore> ctx_;
  const Track track_;
  std::shared_ptr<Pipe> pipe_;
  int side_ = 0;
  int peer_ = 0;
  std::uint64_t remote_id_ = 0;
  bool disconnected_ = false;
};

}  // namespace pier::drivers::self
