// pier::lib: message states (one per operation in flight, from a pool sized
// at init) and triggered operations (parked on their trigger CT).
#pragma once

#include <portals4.h>

#include <cstddef>
#include <cstdint>

#include "core/core.hpp"
#include "lib/objects.hpp"
#include "wire/portals.hpp"

namespace pier::lib {

/// One data-movement request: put, get, atomic, fetch_atomic or swap.
struct Move {
  wire::PortalsOp op = wire::PortalsOp::put;
  ptl_handle_md_t md = PTL_INVALID_HANDLE;      ///< put MD (get MD for get)
  ptl_handle_md_t get_md = PTL_INVALID_HANDLE;  ///< fetch_atomic, swap
  ptl_size_t local_offset = 0, local_get_offset = 0, length = 0;
  ptl_ack_req_t ack_req = PTL_NO_ACK_REQ;
  ptl_process_t target{};
  ptl_pt_index_t pt_index = 0;
  ptl_match_bits_t match_bits = 0;
  ptl_size_t remote_offset = 0;
  void* user_ptr = nullptr;
  ptl_hdr_data_t hdr_data = 0;
  ptl_op_t atomic_op = 0;
  ptl_datatype_t atomic_type = 0;
  std::uint32_t operand_length = 0;
  std::byte operand[wire::max_operand_length] = {};
};

/// The one answer kind a target sends for a request (and the initiator
/// takes): a reply carries the data of a get, fetch_atomic or swap; a put
/// or atomic is acknowledged as its ack request says.
inline wire::PortalsOp answer_op(wire::PortalsOp request, ptl_ack_req_t ack) noexcept {
  switch (request) {
    case wire::PortalsOp::get:
    case wire::PortalsOp::fetch_atomic:
    case wire::PortalsOp::swap:
      return wire::PortalsOp::reply;
    default:
      break;
  }
  switch (ack) {
    case PTL_CT_ACK_REQ:
      return wire::PortalsOp::ct_ack;
    case PTL_OC_ACK_REQ:
      return wire::PortalsOp::oc_ack;
    default:
      return wire::PortalsOp::ack;
  }
}

/// What a message is waiting for; lib_finalize dispatches on it.
enum class Phase : std::uint8_t {
  init_send,    ///< initiator: request leaving
  init_reply,   ///< initiator: reply data landing
  target_recv,  ///< target: request data landing
  target_send,  ///< target: reply data leaving (get, fetch_atomic, swap)
};

struct Msg {
  /// Provided, so that the pool's `new Msg()` runs the initializers below
  /// and nothing else: an implicit constructor made it value-initialize,
  /// zeroing all 300 bytes (`ev` too) before setting the fields.
  Msg() noexcept {}
  // The fields go by size, eight bytes, four, then one, and the event last:
  // the initializers then make one run of vector stores, where fields
  // scattered between padding took 28 instructions a message.
  Msg* prev = nullptr;  ///< on Lib::awaiting_ while an answer is due
  Msg* next = nullptr;
  Ni* ni = nullptr;
  /// Target: a put whose staging run was not free yet keeps its arrival
  /// here until stage_retry() answers it (a get waits with none).
  core::Incoming* parked = nullptr;
  std::uint64_t parked_rlen = 0;
  // initiator
  Md* md = nullptr;      ///< put MD, or the get MD of a get
  Md* get_md = nullptr;  ///< fetch_atomic, swap
  void* user_ptr = nullptr;
  ptl_size_t length = 0;
  ptl_size_t local_get_offset = 0;
  ptl_size_t answer_mlength = 0, answer_offset = 0;
  // target
  Pt* pt = nullptr;
  Entry* entry = nullptr;
  Unexpected* uh = nullptr;
  std::uint64_t cookie = 0;  ///< the initiator's, echoed in the answer
  ptl_size_t offset_used = 0;

  core::Rank peer = 0;       ///< initiator: where the request went
  std::uint32_t bounce = 0;  ///< slot index in the bounce slab
  /// A run of staging blocks (stage_count of them from block `stage`) for
  /// an iovec range that crosses elements and is longer than half a bounce
  /// slot; none when stage_count is 0.
  std::uint32_t stage = 0;
  std::uint32_t stage_count = 0;
  /// Target: places held in a flow-controlled index's queue for this
  /// message's events (Eq::owed), given back when it completes.
  std::uint32_t eq_held = 0;
  std::uint32_t eq_held_handle = 0;
  core::Rank source = 0;  ///< target
  std::uint32_t operand_length = 0;

  bool awaiting = false;
  Phase phase = Phase::init_send;
  bool initiator = true;
  wire::PortalsOp op = wire::PortalsOp::put;
  // initiator
  ptl_ack_req_t ack_req = PTL_NO_ACK_REQ;
  bool sent = false;      ///< lib_finalize of the request ran
  bool answered = false;  ///< the answer (ack or reply) completed
  bool want_answer = false;
  ptl_ni_fail_t send_fail = PTL_NI_OK;
  ptl_ni_fail_t answer_fail = PTL_NI_OK;
  ptl_list_t answer_list = PTL_PRIORITY_LIST;
  // target
  bool unlink_after = false;
  bool late_write = false;  ///< counted in Lib::late_writes_ until it completes
  bool held_put = false;    ///< a contiguous put kept in the bounce slot, written at completion
  /// The entry's range crosses iovec elements: the data lands staged and
  /// is scattered at completion.
  bool cross = false;
  ptl_ack_req_t target_ack = PTL_NO_ACK_REQ;
  /// The target event, every field written at parse time before any use;
  /// not zeroed with the rest, which made every new message a rep stos.
  ptl_event_t ev;
};

enum class TrigKind : std::uint8_t { move, ct_inc, ct_set, me_append, me_unlink };

struct Trig {
  Trig* prev = nullptr;
  Trig* next = nullptr;
  TrigKind kind = TrigKind::move;
  ptl_size_t threshold = 0;
  Ct* on = nullptr;
  Move move;
  std::uint32_t ct = 0;  ///< ct_inc / ct_set target, me_unlink handle
  ptl_ct_event_t value{0, 0};
  std::uint32_t ni = 0;  ///< me_append
  ptl_pt_index_t pt_index = 0;
  ptl_me_t* me = nullptr;
  ptl_list_t list = 0;
  void* user_ptr = nullptr;
  ptl_handle_me_t* me_out = nullptr;
};

}  // namespace pier::lib
