// PORTALS4.md §6.12 atomics (R-A*) across two processes: rank 0 holds the
// target memory, rank 1 runs the operations and reads the results back
// with gets (R-A7: both ranks operate on rank 0's memory at once).
#include <array>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "rules_job.hpp"

namespace pier::portals::rules {
namespace {

/// Rank 0's side of every atomic rule: 256 aligned bytes that take puts,
/// gets and atomics (no comm events), exposed until rank 1 is done.
alignas(16) unsigned char target_memory[256];

void expose_target(Job& j, unsigned options = PTL_ME_OP_PUT | PTL_ME_OP_GET) {
  int tag = 0;
  j.add(j.me_for(target_memory, sizeof target_memory, options | PTL_ME_EVENT_COMM_DISABLE),
        PTL_PRIORITY_LIST, &tag);
  if (j.sync()) j.sync();
}

/// Rank 1's view of rank 0's memory: writes and reads it with acked puts
/// and gets, and runs atomics at offset 0.
struct Remote {
  Job& j;
  alignas(16) unsigned char source[64] = {};
  alignas(16) unsigned char fetched[64] = {};
  ptl_handle_md_t put_md, get_md;

  explicit Remote(Job& job)
      : j(job), put_md(j.bind(source, sizeof source)), get_md(j.bind(fetched, sizeof fetched)) {}

  template <class T>
  void write(const T& value, int line) {
    std::memcpy(source, &value, sizeof value);
    j.check_eq(line, "put ACK", j.put_acked(put_md, 0, sizeof value, 0, 0, line).ni_fail_type,
               PTL_NI_OK);
  }
  template <class T>
  T read(int line) {
    j.check_eq(line, "get REPLY", j.get_reply(get_md, 0, sizeof(T), 0, 0, line).ni_fail_type,
               PTL_NI_OK);
    T value;
    std::memcpy(&value, fetched, sizeof value);
    return value;
  }
  /// PtlAtomic of `n` elements of `operand`; the ACK's failure type.
  template <class T>
  int atomic(ptl_op_t op, ptl_datatype_t type, const T& operand, std::size_t n, int line) {
    for (std::size_t i = 0; i < n; ++i) std::memcpy(source + i * sizeof(T), &operand, sizeof(T));
    const int rc = PtlAtomic(put_md, 0, n * sizeof(T), PTL_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr,
                             0, op, type);
    if (rc != PTL_OK) return j.fail_value(line, "PtlAtomic", rc, PTL_OK), -1;
    j.expect(j.ieq, PTL_EVENT_SEND, line);
    return j.expect(j.ieq, PTL_EVENT_ACK, line).ni_fail_type;
  }
  /// PtlSwap of one T; returns the REPLY's failure type, the prior value
  /// lands in `fetched`.
  template <class T>
  int swap(ptl_op_t op, ptl_datatype_t type, const T& value, const void* operand, int line,
           std::size_t length = sizeof(T)) {
    std::memcpy(source, &value, sizeof value);
    const int rc =
        PtlSwap(get_md, 0, put_md, 0, length, j.peer, rule_pt, 0, 0, nullptr, 0, operand, op, type);
    if (rc != PTL_OK) return j.fail_value(line, "PtlSwap", rc, PTL_OK), -1;
    j.expect(j.ieq, PTL_EVENT_SEND, line);
    return j.expect(j.ieq, PTL_EVENT_REPLY, line).ni_fail_type;
  }
};

/// R-A1: the target supports every (operation, datatype) pair the table
/// allows: each Atomic, FetchAtomic and Swap of them is acknowledged with
/// PTL_NI_OK by rank 0.
void rule_a1(Job& j) {
  if (j.target()) return expose_target(j);
  static const std::size_t sizes[PTL_DATATYPE_LAST] = {
      1, 1, 2, 2, 4, 4, 4, 8, 8, 8, 8, 16, sizeof(long double), sizeof(std::complex<long double>)};
  Remote r(j);
  alignas(16) unsigned char operand[32] = {};
  if (!j.sync()) return;
  int calls = 0;
  for (ptl_op_t op = 0; op < PTL_OP_LAST; ++op)
    for (ptl_datatype_t type = 0; type < PTL_DATATYPE_LAST; ++type) {
      const bool integer = type <= PTL_UINT32_T || type == PTL_INT64_T || type == PTL_UINT64_T;
      const bool complex = type == PTL_FLOAT_COMPLEX || type == PTL_DOUBLE_COMPLEX ||
                           type == PTL_LONG_DOUBLE_COMPLEX;
      const bool swap_op = op >= PTL_SWAP;
      bool legal = true;
      if ((op == PTL_MIN || op == PTL_MAX) && complex) legal = false;
      if (op >= PTL_LOR && op <= PTL_BXOR && !integer) legal = false;
      if (op >= PTL_CSWAP_LE && op <= PTL_CSWAP_GT && complex) legal = false;
      if (op == PTL_MSWAP && !integer) legal = false;
      if (!legal) continue;
      const ptl_size_t len = sizes[type];
      int fails[2] = {PTL_NI_OK, PTL_NI_OK};
      if (swap_op) {
        fails[0] = r.swap(op, type, operand, operand, __LINE__, len);
      } else {
        RULE_CALL(j, PtlAtomic(r.put_md, 0, len, PTL_ACK_REQ, j.peer, rule_pt, 0, 0, nullptr, 0, op,
                               type));
        j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
        fails[0] = j.expect(j.ieq, PTL_EVENT_ACK, __LINE__).ni_fail_type;
        RULE_CALL(j, PtlFetchAtomic(r.get_md, 0, r.put_md, 0, len, j.peer, rule_pt, 0, 0, nullptr,
                                    0, op, type));
        j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
        fails[1] = j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__).ni_fail_type;
      }
      for (int f : fails)
        if (f != PTL_NI_OK) {
          std::fprintf(stderr, "rank 1: op %d type %d failed at the target (%d)\n", int(op),
                       int(type), f);
          j.fail(__LINE__, "a legal atomic is done by the target");
        }
      ++calls;
      if (j.errors > 3) return;
    }
  // MIN/MAX on 11 types, SUM/PROD on 14, six logical ops on 8 integer
  // types, SWAP/CSWAP/CSWAP_NE on 14, four ordered CSWAPs on 11, MSWAP on 8.
  RULE_EQ(j, calls, 2 * 11 + 2 * 14 + 6 * 8 + 3 * 14 + 4 * 11 + 8);
  j.sync();
}

/// R-A2: element-wise, target = op(initiator, target); logical ops give
/// 0/1; integers wrap.
void rule_a2(Job& j) {
  if (j.target()) return expose_target(j);
  Remote r(j);
  if (!j.sync()) return;
  std::int32_t four[4] = {-5, 5, 15, 25};
  r.write(four, __LINE__);
  RULE_EQ(j, r.atomic<std::int32_t>(PTL_SUM, PTL_INT32_T, 3, 4, __LINE__), PTL_NI_OK);
  auto sums = r.read<std::array<std::int32_t, 4>>(__LINE__);
  for (int i = 0; i < 4; ++i) RULE_EQ(j, sums[i], 10 * i - 2);
  RULE_EQ(j, r.atomic<std::int32_t>(PTL_MIN, PTL_INT32_T, 3, 4, __LINE__), PTL_NI_OK);
  auto mins = r.read<std::array<std::int32_t, 4>>(__LINE__);
  RULE_EQ(j, mins[0], -2);
  RULE_EQ(j, mins[3], 3);
  r.write(1.5, __LINE__);
  RULE_EQ(j, r.atomic(PTL_MAX, PTL_DOUBLE, 2.5, 1, __LINE__), PTL_NI_OK);
  RULE_TRUE(j, r.read<double>(__LINE__) == 2.5);
  RULE_EQ(j, r.atomic(PTL_PROD, PTL_DOUBLE, 2.5, 1, __LINE__), PTL_NI_OK);
  RULE_TRUE(j, r.read<double>(__LINE__) == 6.25);
  r.write(std::uint8_t{0xf0}, __LINE__);
  RULE_EQ(j, r.atomic(PTL_BXOR, PTL_UINT8_T, std::uint8_t{0x3c}, 1, __LINE__), PTL_NI_OK);
  RULE_EQ(j, r.read<std::uint8_t>(__LINE__), 0xcc);
  RULE_EQ(j, r.atomic(PTL_LAND, PTL_UINT8_T, std::uint8_t{0x3c}, 1, __LINE__), PTL_NI_OK);
  RULE_EQ(j, r.read<std::uint8_t>(__LINE__), 1);
  r.write(INT64_MAX, __LINE__);
  RULE_EQ(j, r.atomic(PTL_SUM, PTL_INT64_T, std::int64_t{1}, 1, __LINE__), PTL_NI_OK);
  RULE_EQ(j, r.read<std::int64_t>(__LINE__), INT64_MIN);
  using C = std::complex<double>;
  r.write(C(1, 2), __LINE__);
  RULE_EQ(j, r.atomic(PTL_PROD, PTL_DOUBLE_COMPLEX, C(3, 4), 1, __LINE__), PTL_NI_OK);
  RULE_TRUE(j, r.read<C>(__LINE__) == C(-5, 10));
  r.write(std::uint16_t{0x00f0}, __LINE__);
  RULE_EQ(j, r.atomic(PTL_BOR, PTL_UINT16_T, std::uint16_t{0x0f01}, 1, __LINE__), PTL_NI_OK);
  RULE_EQ(j, r.read<std::uint16_t>(__LINE__), 0x0ff1);
  j.sync();
}

/// R-A3: conditional swaps compare the operand with the target; the
/// prior value always comes back.
void rule_a3(Job& j) {
  if (j.target()) return expose_target(j);
  Remote r(j);
  if (!j.sync()) return;
  const struct {
    ptl_op_t op;
    std::int32_t target, operand;
    bool swaps;
  } cases[] = {
      {PTL_CSWAP, 5, 5, true},     {PTL_CSWAP, 5, 6, false},   {PTL_CSWAP_NE, 5, 6, true},
      {PTL_CSWAP_NE, 5, 5, false}, {PTL_CSWAP_LE, 5, 4, true}, {PTL_CSWAP_LE, 5, 6, false},
      {PTL_CSWAP_LT, 5, 5, false}, {PTL_CSWAP_LT, 5, 4, true}, {PTL_CSWAP_GE, 5, 5, true},
      {PTL_CSWAP_GE, 5, 4, false}, {PTL_CSWAP_GT, 5, 6, true}, {PTL_CSWAP_GT, 5, 5, false}};
  for (const auto& c : cases) {
    r.write(c.target, __LINE__);
    RULE_EQ(j, r.swap(c.op, PTL_INT32_T, std::int32_t{99}, &c.operand, __LINE__), PTL_NI_OK);
    std::int32_t prior;
    std::memcpy(&prior, r.fetched, sizeof prior);
    if (!RULE_EQ(j, prior, c.target)) std::fprintf(stderr, "  (op %d)\n", int(c.op));
    if (!RULE_EQ(j, r.read<std::int32_t>(__LINE__), c.swaps ? 99 : c.target))
      std::fprintf(stderr, "  (op %d, operand %d)\n", int(c.op), int(c.operand));
  }
  // A double too: CSWAP_GT swaps when the operand is greater.
  r.write(1.25, __LINE__);
  const double two = 2.0;
  RULE_EQ(j, r.swap(PTL_CSWAP_GT, PTL_DOUBLE, 7.5, &two, __LINE__), PTL_NI_OK);
  RULE_TRUE(j, r.read<double>(__LINE__) == 7.5);
  j.sync();
}

/// R-A4: MSWAP: target = (initiator & mask) | (target & ~mask), prior
/// value back.
void rule_a4(Job& j) {
  if (j.target()) return expose_target(j);
  Remote r(j);
  if (!j.sync()) return;
  r.write(std::uint16_t{0x1234}, __LINE__);
  const std::uint16_t mask = 0x0ff0;
  RULE_EQ(j, r.swap(PTL_MSWAP, PTL_UINT16_T, std::uint16_t{0xabcd}, &mask, __LINE__), PTL_NI_OK);
  std::uint16_t prior;
  std::memcpy(&prior, r.fetched, sizeof prior);
  RULE_EQ(j, prior, 0x1234);
  RULE_EQ(j, r.read<std::uint16_t>(__LINE__), 0x1bc4);
  r.write(std::uint64_t{0xffff0000ffff0000}, __LINE__);
  const std::uint64_t mask64 = 0x00ffff0000ffff00;
  RULE_EQ(j, r.swap(PTL_MSWAP, PTL_UINT64_T, std::uint64_t{0x0123456789abcdef}, &mask64, __LINE__),
          PTL_NI_OK);
  RULE_EQ(j, r.read<std::uint64_t>(__LINE__), 0xff234500ffabcd00);
  j.sync();
}

/// R-A5: SWAP exchanges the whole length (several elements), ignoring the
/// operand.
void rule_a5(Job& j) {
  if (j.target()) return expose_target(j);
  Remote r(j);
  if (!j.sync()) return;
  const float before[4] = {9, 8, 7, 6}, after[4] = {0, 1, 2, 3};
  r.write(before, __LINE__);
  std::memcpy(r.source, after, sizeof after);
  RULE_CALL(j, PtlSwap(r.get_md, 0, r.put_md, 0, 16, j.peer, rule_pt, 0, 0, nullptr, 0, nullptr,
                       PTL_SWAP, PTL_FLOAT));
  j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
  RULE_EQ(j, j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__).mlength, 16);
  RULE_BYTES(j, r.fetched, before, 16);
  const auto now = r.read<std::array<float, 4>>(__LINE__);
  RULE_BYTES(j, now.data(), after, 16);
  j.sync();
}

/// R-A6: fetch forms return the value before the operation.
void rule_a6(Job& j) {
  if (j.target()) return expose_target(j);
  Remote r(j);
  if (!j.sync()) return;
  auto fetch = [&](ptl_op_t op, ptl_datatype_t type, auto operand) {
    std::memcpy(r.source, &operand, sizeof operand);
    const int rc = PtlFetchAtomic(r.get_md, 0, r.put_md, 0, sizeof operand, j.peer, rule_pt, 0, 0,
                                  nullptr, 0, op, type);
    j.check_eq(__LINE__, "PtlFetchAtomic", rc, PTL_OK);
    j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
    j.check_eq(__LINE__, "REPLY", j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__).ni_fail_type,
               PTL_NI_OK);
    decltype(operand) prior;
    std::memcpy(&prior, r.fetched, sizeof prior);
    return prior;
  };
  r.write(std::uint64_t{40}, __LINE__);
  RULE_EQ(j, fetch(PTL_SUM, PTL_UINT64_T, std::uint64_t{2}), 40);
  RULE_EQ(j, fetch(PTL_SUM, PTL_UINT64_T, std::uint64_t{2}), 42);
  RULE_EQ(j, r.read<std::uint64_t>(__LINE__), 44);
  r.write(std::int16_t{-7}, __LINE__);
  RULE_EQ(j, fetch(PTL_MAX, PTL_INT16_T, std::int16_t{3}), -7);
  RULE_EQ(j, r.read<std::int16_t>(__LINE__), 3);
  r.write(std::uint32_t{0x0f}, __LINE__);
  RULE_EQ(j, fetch(PTL_BOR, PTL_UINT32_T, std::uint32_t{0xf0}), 0x0f);
  RULE_EQ(j, r.read<std::uint32_t>(__LINE__), 0xff);
  j.sync();
}

/// R-A7: atomicity: rank 1 and rank 0 itself fetch-add to the same
/// counter of rank 0 at once; no increment is lost, and each rank's
/// fetched values only grow.
void rule_a7(Job& j) {
  constexpr int adds = 300;
  std::uint64_t one = 1, prior = 0;
  const ptl_handle_md_t put_md = j.bind(&one, sizeof one);
  const ptl_handle_md_t get_md = j.bind(&prior, sizeof prior);
  if (j.target()) {
    std::memset(target_memory, 0, 8);
    int tag = 0;
    j.add(j.me_for(target_memory, 8, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_COMM_DISABLE),
          PTL_PRIORITY_LIST, &tag);
  }
  // Rank 0 targets itself: the same NI serves both initiators.
  ptl_process_t counter_owner = j.target() ? j.me : j.peer;
  if (!j.sync()) return;
  std::uint64_t last = 0;
  for (int i = 0; i < adds; ++i) {
    RULE_CALL(j, PtlFetchAtomic(get_md, 0, put_md, 0, 8, counter_owner, rule_pt, 0, 0, nullptr, 0,
                                PTL_SUM, PTL_UINT64_T));
    j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
    if (j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__).type != PTL_EVENT_REPLY) return;
    if (i > 0 && !RULE_TRUE(j, prior > last)) return;
    last = prior;
  }
  j.sync();
  if (j.target()) {
    std::uint64_t total;
    std::memcpy(&total, target_memory, 8);
    RULE_EQ(j, total, 2 * adds);
  }
}

/// R-A8: Atomic needs OP_PUT on the entry; FetchAtomic and Swap need
/// OP_PUT and OP_GET, else PTL_NI_OP_VIOLATION.
void rule_a8(Job& j) {
  if (j.target()) {
    alignas(8) static unsigned char put_only[8], get_only[8], both[8];
    int t1 = 0, t2 = 0, t3 = 0;
    j.add(j.me_for(put_only, 8, PTL_ME_OP_PUT | PTL_ME_EVENT_COMM_DISABLE, 1), PTL_PRIORITY_LIST,
          &t1);
    j.add(j.me_for(get_only, 8, PTL_ME_OP_GET | PTL_ME_EVENT_COMM_DISABLE, 2), PTL_PRIORITY_LIST,
          &t2);
    j.add(j.me_for(both, 8, PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_COMM_DISABLE, 3),
          PTL_PRIORITY_LIST, &t3);
    if (j.sync()) j.sync();
    std::uint64_t v;
    std::memcpy(&v, put_only, 8);
    RULE_EQ(j, v, 5);  // only the plain atomic landed there
    std::memcpy(&v, get_only, 8);
    RULE_EQ(j, v, 0);
    std::memcpy(&v, both, 8);
    RULE_EQ(j, v, 10);
    return;
  }
  alignas(8) std::uint64_t five = 5, back = 0, operand = 0;
  const ptl_handle_md_t md = j.bind(&five, 8), gmd = j.bind(&back, 8);
  if (!j.sync()) return;
  auto atomic = [&](ptl_match_bits_t bits) {
    j.check_eq(__LINE__, "PtlAtomic",
               PtlAtomic(md, 0, 8, PTL_ACK_REQ, j.peer, rule_pt, bits, 0, nullptr, 0, PTL_SUM,
                         PTL_UINT64_T),
               PTL_OK);
    j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
    return j.expect(j.ieq, PTL_EVENT_ACK, __LINE__).ni_fail_type;
  };
  auto fetch = [&](ptl_match_bits_t bits) {
    j.check_eq(__LINE__, "PtlFetchAtomic",
               PtlFetchAtomic(gmd, 0, md, 0, 8, j.peer, rule_pt, bits, 0, nullptr, 0, PTL_SUM,
                              PTL_UINT64_T),
               PTL_OK);
    j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
    return j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__).ni_fail_type;
  };
  auto swap = [&](ptl_match_bits_t bits) {
    j.check_eq(__LINE__, "PtlSwap",
               PtlSwap(gmd, 0, md, 0, 8, j.peer, rule_pt, bits, 0, nullptr, 0, &operand, PTL_SWAP,
                       PTL_UINT64_T),
               PTL_OK);
    j.expect(j.ieq, PTL_EVENT_SEND, __LINE__);
    return j.expect(j.ieq, PTL_EVENT_REPLY, __LINE__).ni_fail_type;
  };
  RULE_EQ(j, atomic(1), PTL_NI_OK);
  RULE_EQ(j, fetch(1), PTL_NI_OP_VIOLATION);
  RULE_EQ(j, swap(1), PTL_NI_OP_VIOLATION);
  RULE_EQ(j, atomic(2), PTL_NI_OP_VIOLATION);
  RULE_EQ(j, fetch(2), PTL_NI_OP_VIOLATION);
  RULE_EQ(j, fetch(3), PTL_NI_OK);
  RULE_EQ(j, swap(3), PTL_NI_OK);  // 5, then swapped for 5 again
  RULE_EQ(j, back, 5);
  RULE_EQ(j, atomic(3), PTL_NI_OK);  // 10
  j.sync();
}

}  // namespace

const Rule atomic_rules[] = {
    {"R-A1", rule_a1}, {"R-A2", rule_a2}, {"R-A3", rule_a3}, {"R-A4", rule_a4},  {"R-A5", rule_a5},
    {"R-A6", rule_a6}, {"R-A7", rule_a7}, {"R-A8", rule_a8}, {nullptr, nullptr},
};

}  // namespace pier::portals::rules
