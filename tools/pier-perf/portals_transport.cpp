// pier-perf over Portals 4 puts (include/portals4.h), the way a Portals
// program streams: a logical matching NI; on each side one persistent ME
// over the receive buffer (portal 0) and one over a ring of control slots
// (portal 1), each counting its puts with a CT; the data and control MDs
// count their sends. No events are queued: every wait is a PtlCTPoll.
//
// A put that reaches a peer before it appended its MEs is dropped (a target
// with the progress thread answers puts from the moment PtlNIInit
// returned), so open() ends with a handshake: each side puts to the peer's
// "ready" portal, appended last, with a counting ack, until one is acked
// without failure.
#include "api.hpp"

#include "base/config.hpp"

#include <portals4.h>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace pier::perf {
namespace {

constexpr ptl_pt_index_t data_pt = 0;
constexpr ptl_pt_index_t ctrl_pt = 1;
constexpr ptl_pt_index_t ready_pt = 2;
constexpr std::size_t ctrl_slots = 64;  ///< control values in flight, at most

std::string ptl_text(int rc) {
  switch (rc) {
    case PTL_OK:
      return "PTL_OK";
    case PTL_ARG_INVALID:
      return "PTL_ARG_INVALID";
    case PTL_CT_NONE_REACHED:
      return "PTL_CT_NONE_REACHED";
    case PTL_NO_INIT:
      return "PTL_NO_INIT";
    case PTL_NO_SPACE:
      return "PTL_NO_SPACE";
    case PTL_ABORTED:
      return "PTL_ABORTED";
    case PTL_PT_IN_USE:
      return "PTL_PT_IN_USE";
    case PTL_FAIL:
      return "PTL_FAIL";
    default:
      return fmt::format("Portals error {}", rc);
  }
}

Failure ptl_failure(int rc, const char* what) {
  return {Status::system_error, fmt::format("{} returned {}", what, ptl_text(rc))};
}

class PortalsTransport final : public Transport {
 public:
  ~PortalsTransport() override {
    if (!up_) return;
    for (auto* me : {&data_me_, &ctrl_me_, &ready_me_})
      if (*me != PTL_INVALID_HANDLE) (void)PtlMEUnlink(*me);
    for (auto* md : {&data_md_, &ctrl_md_, &ready_md_})
      if (*md != PTL_INVALID_HANDLE) (void)PtlMDRelease(*md);
    for (auto* ct : {&data_ct_, &ctrl_ct_, &data_md_ct_, &ctrl_md_ct_, &ready_md_ct_})
      if (*ct != PTL_INVALID_HANDLE) (void)PtlCTFree(*ct);
    (void)PtlNIFini(ni_);
    PtlFini();
  }

  Failure open(std::size_t largest, std::uint32_t* rank, std::uint32_t* ranks) {
    if (int rc = PtlInit(); rc != PTL_OK) return ptl_failure(rc, "PtlInit");
    inited_ = true;
    ptl_ni_limits_t limits{};
    if (int rc = PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY,
                           nullptr, &limits, &ni_);
        rc != PTL_OK) {
      PtlFini();
      inited_ = false;
      return ptl_failure(rc, "PtlNIInit");
    }
    up_ = true;
    if (limits.max_msg_size < largest)
      return {Status::invalid_argument, fmt::format("the NI's max_msg_size is {} bytes, below {}",
                                                    limits.max_msg_size, largest)};
    ptl_process_t me{};
    if (int rc = PtlGetId(ni_, &me); rc != PTL_OK) return ptl_failure(rc, "PtlGetId");
    ptl_size_t map_size = 0;
    if (int rc = PtlGetMap(ni_, 0, nullptr, &map_size); rc != PTL_OK)
      return ptl_failure(rc, "PtlGetMap");
    *rank = me.rank;
    *ranks = static_cast<std::uint32_t>(map_size);
    if (map_size != 2) return {};  // the caller refuses the job size
    peer_.rank = 1 - me.rank;
    send_buf_.assign(std::max<std::size_t>(largest, 8), std::byte{0x5a});
    recv_buf_.assign(send_buf_.size(), std::byte{0});
    ctrl_in_.assign(ctrl_slots, 0);
    ctrl_out_.assign(ctrl_slots, 0);
    for (auto* ct : {&data_ct_, &ctrl_ct_, &data_md_ct_, &ctrl_md_ct_, &ready_md_ct_})
      if (int rc = PtlCTAlloc(ni_, ct); rc != PTL_OK) return ptl_failure(rc, "PtlCTAlloc");
    for (auto pt : {data_pt, ctrl_pt, ready_pt}) {
      ptl_pt_index_t got = 0;
      if (int rc = PtlPTAlloc(ni_, 0, PTL_EQ_NONE, pt, &got); rc != PTL_OK)
        return ptl_failure(rc, "PtlPTAlloc");
    }
    if (Failure f = append(data_pt, recv_buf_.data(), recv_buf_.size(), data_ct_, &data_me_))
      return f;
    if (Failure f = append(ctrl_pt, ctrl_in_.data(), ctrl_slots * 8, ctrl_ct_, &ctrl_me_)) return f;
    if (Failure f = bind(send_buf_.data(), send_buf_.size(), data_md_ct_, &data_md_)) return f;
    if (Failure f = bind(ctrl_out_.data(), ctrl_slots * 8, ctrl_md_ct_, &ctrl_md_)) return f;
    // Last: the peer's ready put matching here means everything above is up.
    if (Failure f = append(ready_pt, &ready_in_, 8, PTL_CT_NONE, &ready_me_)) return f;
    if (Failure f = bind(&ready_out_, 8, ready_md_ct_, &ready_md_, PTL_MD_EVENT_CT_ACK)) return f;
    return wait_peer_ready(Clock::now() + std::chrono::seconds(30));
  }

  std::span<std::byte> send_bytes(std::size_t size) noexcept override {
    return std::span(send_buf_).first(size);
  }
  Failure expect_data(std::size_t, std::size_t) noexcept override { return {}; }

  Failure post_data(std::size_t size, std::size_t max_in_flight,
                    Deadline deadline) noexcept override {
    if (data_sent_ + 1 > max_in_flight)
      if (Failure f = wait_ct(data_md_ct_, data_sent_ + 1 - max_in_flight, deadline, "data send"))
        return f;
    const int rc = PtlPut(data_md_, 0, size, PTL_NO_ACK_REQ, peer_, data_pt, 0, 0, nullptr, 0);
    if (rc != PTL_OK) return ptl_failure(rc, "PtlPut");
    ++data_sent_;
    return {};
  }
  Failure finish_sends(Deadline deadline) noexcept override {
    return wait_ct(data_md_ct_, data_sent_, deadline, "data send");
  }
  Failure wait_data(std::size_t size, Deadline deadline,
                    std::span<std::byte>* landed) noexcept override {
    if (Failure f = wait_ct(data_ct_, data_recvd_ + 1, deadline, "data receive")) return f;
    ++data_recvd_;
    *landed = std::span(recv_buf_).first(size);
    return {};
  }
  Failure release_data(std::span<std::byte>) noexcept override { return {}; }
  bool stream_lands_apart() const noexcept override { return false; }

  Failure send_ctrl(std::uint64_t value, Deadline deadline) noexcept override {
    // Slot i of the peer's ring takes our i-th value; at most ctrl_slots are
    // unread, since every control value is answered before the next phase.
    const std::size_t slot = ctrl_sent_ % ctrl_slots;
    if (ctrl_sent_ >= ctrl_slots)
      if (Failure f = wait_ct(ctrl_md_ct_, ctrl_sent_ + 1 - ctrl_slots, deadline, "control send"))
        return f;
    ctrl_out_[slot] = value;
    const int rc =
        PtlPut(ctrl_md_, slot * 8, 8, PTL_NO_ACK_REQ, peer_, ctrl_pt, 0, slot * 8, nullptr, 0);
    if (rc != PTL_OK) return ptl_failure(rc, "PtlPut (control)");
    ++ctrl_sent_;
    // The slot is reused ctrl_slots values later: wait for it to leave now,
    // cheap for 8 bytes, so that a rewrite can never race the transfer.
    return wait_ct(ctrl_md_ct_, ctrl_sent_, deadline, "control send");
  }
  Failure recv_ctrl(std::uint64_t* value, Deadline deadline) noexcept override {
    if (Failure f = wait_ct(ctrl_ct_, ctrl_recvd_ + 1, deadline, "control receive")) return f;
    *value = ctrl_in_[ctrl_recvd_ % ctrl_slots];
    ++ctrl_recvd_;
    return {};
  }

 private:
  Failure append(ptl_pt_index_t pt, void* start, std::size_t len, ptl_handle_ct_t ct,
                 ptl_handle_me_t* me) {
    ptl_me_t e{};
    e.start = start;
    e.length = len;
    e.ct_handle = ct;
    e.uid = PTL_UID_ANY;
    e.options = PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM | PTL_ME_EVENT_LINK_DISABLE |
                PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_UNLINK_DISABLE;
    e.match_id.rank = PTL_RANK_ANY;
    e.ignore_bits = ~ptl_match_bits_t{0};
    if (int rc = PtlMEAppend(ni_, pt, &e, PTL_PRIORITY_LIST, nullptr, me); rc != PTL_OK)
      return ptl_failure(rc, "PtlMEAppend");
    return {};
  }
  Failure bind(void* start, std::size_t len, ptl_handle_ct_t ct, ptl_handle_md_t* md,
               unsigned options = PTL_MD_EVENT_CT_SEND) {
    ptl_md_t d{};
    d.start = start;
    d.length = len;
    d.options = options;
    d.eq_handle = PTL_EQ_NONE;
    d.ct_handle = ct;
    if (int rc = PtlMDBind(ni_, &d, md); rc != PTL_OK) return ptl_failure(rc, "PtlMDBind");
    return {};
  }
  /// Puts to the peer's ready portal until one is acked without failure: a
  /// put that arrives before the peer appended its MEs is acked as dropped.
  Failure wait_peer_ready(Deadline deadline) noexcept {
    for (;;) {
      const int rc = PtlPut(ready_md_, 0, 8, PTL_CT_ACK_REQ, peer_, ready_pt, 0, 0, nullptr, 0);
      if (rc != PTL_OK) return ptl_failure(rc, "PtlPut (ready)");
      // The counter starts at zero for each try: its ack (ok or dropped)
      // either counts a success or a failure, which both end the poll.
      ptl_ct_event_t ev{};
      if (Failure f = wait_ct(ready_md_ct_, 1, deadline, "ready ack", &ev)) return f;
      if (ev.success > 0) return {};
      if (int crc = PtlCTSet(ready_md_ct_, ptl_ct_event_t{0, 0}); crc != PTL_OK)
        return ptl_failure(crc, "PtlCTSet (ready)");
      if (Clock::now() >= deadline)
        return {Status::timeout, "the peer's portals never became ready"};
      ::usleep(1000);
    }
  }
  /// PtlCTPoll in slices, so that the phase deadline holds.
  /// With `failed`, a failure ends the wait too and is handed back there.
  Failure wait_ct(ptl_handle_ct_t ct, std::size_t target, Deadline deadline, const char* what,
                  ptl_ct_event_t* failed = nullptr) noexcept {
    for (;;) {
      ptl_ct_event_t ev{};
      unsigned which = 0;
      const ptl_size_t test = target;
      const int rc = PtlCTPoll(&ct, &test, 1, 100, &ev, &which);
      if (failed && rc == PTL_OK) {
        *failed = ev;
        return {};
      }
      if (ev.failure != 0) return {Status::broken, fmt::format("{}: {} failed", what, ev.failure)};
      if (rc == PTL_OK) return {};
      if (rc != PTL_CT_NONE_REACHED) return ptl_failure(rc, "PtlCTPoll");
      if (Clock::now() >= deadline) {
        ptl_sr_value_t dropped = 0;
        (void)PtlNIStatus(ni_, PTL_SR_DROP_COUNT, &dropped);
        return {Status::timeout, fmt::format("{}: {} of {} after the deadline ({} dropped here)",
                                             what, ev.success, target, dropped)};
      }
    }
  }

  bool inited_ = false, up_ = false;
  ptl_handle_ni_t ni_ = PTL_INVALID_HANDLE;
  ptl_process_t peer_{};
  ptl_handle_ct_t data_ct_ = PTL_INVALID_HANDLE, ctrl_ct_ = PTL_INVALID_HANDLE;
  ptl_handle_ct_t data_md_ct_ = PTL_INVALID_HANDLE, ctrl_md_ct_ = PTL_INVALID_HANDLE;
  ptl_handle_me_t data_me_ = PTL_INVALID_HANDLE, ctrl_me_ = PTL_INVALID_HANDLE;
  ptl_handle_md_t data_md_ = PTL_INVALID_HANDLE, ctrl_md_ = PTL_INVALID_HANDLE;
  ptl_handle_ct_t ready_md_ct_ = PTL_INVALID_HANDLE;
  ptl_handle_me_t ready_me_ = PTL_INVALID_HANDLE;
  ptl_handle_md_t ready_md_ = PTL_INVALID_HANDLE;
  std::uint64_t ready_in_ = 0, ready_out_ = 0;
  std::vector<std::byte> send_buf_, recv_buf_;
  std::vector<std::uint64_t> ctrl_in_, ctrl_out_;
  std::size_t data_sent_ = 0, data_recvd_ = 0, ctrl_sent_ = 0, ctrl_recvd_ = 0;
};

}  // namespace

Result<std::unique_ptr<Transport>> open_portals(const std::string& core_drivers,
                                                std::size_t largest, std::uint32_t* rank,
                                                std::uint32_t* ranks, std::string* why) {
  // Before PtlInit: the core reads its driver list when it comes up.
  if (!core_drivers.empty())
    if (Status s = config::set("CORE_DRIVERS", core_drivers); s != Status::ok) {
      *why = fmt::format("PIER_CORE_DRIVERS={} refused: {}", core_drivers, describe(s));
      return s;
    }
  auto t = std::make_unique<PortalsTransport>();
  if (Failure f = t->open(largest, rank, ranks)) {
    *why = f.what;
    return f.status;
  }
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace pier::perf
