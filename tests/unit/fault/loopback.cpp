#include "loopback.hpp"

#include "driver/packet.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

namespace pier::drivers::fault::testing {
namespace {

std::mutex registry_mutex;
std::uint64_t next_id = 1;
std::vector<LoopInstance*>& all_instances() {
  static std::vector<LoopInstance*> v;
  return v;
}

}  // namespace

LoopContext::LoopContext(LoopOptions options) : options_(options) {}
LoopContext::~LoopContext() = default;

Result<driver::Properties> LoopContext::properties(const driver::Hints&) {
  driver::Properties p;
  p.caps.send_buf = options_.send_buf;
  p.caps.recv_post = true;
  p.caps.max_iov = 4;
  p.caps.recv_any = true;
  p.profile.latency_ns = 1;
  p.profile.bandwidth_mbps = 1000;
  return p;
}

Result<std::vector<std::byte>> LoopContext::init() {
  {
    std::lock_guard lock(registry_mutex);
    id_ = next_id++;
  }
  std::vector<std::byte> url(sizeof id_);
  std::memcpy(url.data(), &id_, sizeof id_);
  return url;
}

Status LoopContext::close() {
  if (closed_) return Status::not_initialized;
  closed_ = true;
  return Status::ok;
}

Result<std::unique_ptr<driver::Instance>> LoopContext::open_instance(driver::Track track) {
  if (closed_) return Status::not_initialized;
  auto i = std::make_unique<LoopInstance>(*this, track);
  instances_.push_back(i.get());
  return std::unique_ptr<driver::Instance>(std::move(i));
}

Status LoopContext::probe_any(driver::Instance** ready) {
  for (LoopInstance* i : instances_) {
    if (i->has_ready()) {
      *ready = i;
      return Status::ok;
    }
  }
  *ready = nullptr;
  return Status::in_progress;
}

void LoopContext::forget(LoopInstance* i) {
  instances_.erase(std::remove(instances_.begin(), instances_.end(), i), instances_.end());
}

LoopInstance::~LoopInstance() {
  (void)disconnect();
  std::lock_guard lock(registry_mutex);
  auto& v = all_instances();
  v.erase(std::remove(v.begin(), v.end(), this), v.end());
  ctx_.forget(this);
}

Status LoopInstance::connect_async(std::span<const std::byte> remote_url) {
  if (remote_url.size() != sizeof remote_) return Status::invalid_argument;
  std::memcpy(&remote_, remote_url.data(), sizeof remote_);
  connected_ = true;
  std::lock_guard lock(registry_mutex);
  all_instances().push_back(this);
  return Status::ok;
}

LoopInstance* LoopInstance::peer() noexcept {
  if (peer_ != nullptr || !connected_ || broken_) return peer_;
  std::lock_guard lock(registry_mutex);
  for (LoopInstance* other : all_instances()) {
    if (other != this && other->ctx_.id() == remote_ && other->remote_ == ctx_.id() &&
        other->track_ == track_ && other->peer_ == nullptr && !other->broken_) {
      peer_ = other;
      other->peer_ = this;
    }
  }
  return peer_;
}

Status LoopInstance::disconnect() {
  if (peer_ != nullptr) {
    peer_->broken_ = true;
    peer_->peer_ = nullptr;
    peer_ = nullptr;
  }
  connected_ = false;
  return Status::ok;
}

Status LoopInstance::deliver(const std::byte* bytes, std::size_t len) {
  if (broken_) return Status::broken;
  LoopInstance* p = peer();
  if (p == nullptr) return connected_ ? Status::no_resource : Status::not_initialized;
  if (p->inbox_.size() >= ctx_.options().inbox_limit) return Status::no_resource;
  p->inbox_.emplace_back(bytes, bytes + len);
  ++sends_seen_;
  return Status::ok;
}

Status LoopInstance::send_buf_get(driver::Packet& pkt) {
  if (!ctx_.options().send_buf) return Status::unsupported;
  if (send_buf_out_) return Status::no_resource;
  send_buf_.resize(ctx_.options().buf_bytes);
  send_buf_out_ = true;
  pkt.form = driver::Packet::Form::buffer;
  pkt.buf = send_buf_.data();
  pkt.buf_len = send_buf_.size();
  return Status::ok;
}

Status LoopInstance::send_buf_post(driver::Packet& pkt, std::size_t len) {
  if (!ctx_.options().send_buf) return Status::unsupported;
  if (!send_buf_out_ || len > pkt.buf_len) return Status::invalid_argument;
  const Status st = deliver(pkt.buf, len);
  if (st == Status::no_resource) return st;
  send_buf_out_ = false;
  pkt.length = len;
  return st;
}

Status LoopInstance::send_post(driver::Packet& pkt) {
  std::vector<std::byte> bytes(pkt.size());
  (void)driver::copy_from_packet(pkt, 0, bytes);
  const Status st = deliver(bytes.data(), bytes.size());
  if (st == Status::ok) pkt.length = bytes.size();
  return st;
}

Status LoopInstance::send_poll(driver::Packet&) {
  return broken_ ? Status::broken : Status::ok;
}

Status LoopInstance::recv_post(driver::Packet& pkt) {
  if (posted_ != nullptr) return Status::invalid_argument;
  posted_ = &pkt;
  return Status::in_progress;
}

Status LoopInstance::recv_poll(driver::Packet& pkt) {
  if (posted_ != &pkt) return Status::invalid_argument;
  if (inbox_.empty()) {
    if (!broken_) return Status::in_progress;
    posted_ = nullptr;
    return Status::broken;
  }
  const driver::CopyResult r = driver::copy_into_packet(inbox_.front(), pkt);
  inbox_.pop_front();
  posted_ = nullptr;
  pkt.length = r.copied;
  return r.truncated ? Status::truncated : Status::ok;
}

Status LoopInstance::recv_cancel(driver::Packet& pkt) {
  if (posted_ != &pkt) return Status::invalid_argument;
  posted_ = nullptr;
  return Status::ok;
}

Status LoopInstance::recv_wait(driver::Packet& pkt, driver::Deadline deadline) {
  for (;;) {
    const Status st = recv_poll(pkt);
    if (st != Status::in_progress) return st;
    if (driver::Clock::now() >= deadline) return Status::timeout;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace pier::drivers::fault::testing
