// both_job: one process that uses both of pier's APIs, Portals 4 (one-sided)
// and the port layer (two-sided), in a job of two ranks started by pier-run
// (tests/port/multiproc_test.cpp). Each API brings up a core of its own,
// bootstrapped in its own pier-run session (before sessions, the second
// API's bootstrap was refused: "rank connected twice"). Bringing an API up
// is collective, as MPI_Init is: every rank starts them in the same order.
//   rank 1 puts i into slot i of rank 0's list entry (counted on a CT);
//   rank 0 sees the count, reads the slot and sends i back to rank 1's port;
//   rank 1 checks it before the next put.
// Exit code 0 when every round went through; each failed check prints one
// line. Every wait has a deadline.
#include <pier/port.h>
#include <portals4.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

constexpr int rounds = 100;
constexpr ptl_pt_index_t pt_index = 3;
constexpr unsigned client_port = 1, server_port = 2;
constexpr unsigned message_size = 4;  // 8 bytes: size class 4
constexpr int wait_ms = 20000;
using Clock = std::chrono::steady_clock;

int errors = 0;
#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      ++errors;                                                                               \
      std::fprintf(stderr, "both_job: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                                         \
  } while (0)

struct Portals {
  ptl_handle_ni_t ni{};
  ptl_handle_eq_t eq{};
  ptl_handle_ct_t ct{};
  ptl_handle_le_t le{};
  ptl_handle_md_t md{};
  ptl_pt_index_t pt = 0;
  std::uint64_t slots[rounds] = {};
  std::uint64_t out = 0;

  bool up() {
    if (PtlInit() != PTL_OK) return false;
    if (PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_NO_MATCHING | PTL_NI_LOGICAL, PTL_PID_ANY, nullptr,
                  nullptr, &ni) != PTL_OK)
      return false;
    return PtlEQAlloc(ni, 64, &eq) == PTL_OK &&
           PtlPTAlloc(ni, 0, PTL_EQ_NONE, pt_index, &pt) == PTL_OK;
  }
  bool target() {
    if (PtlCTAlloc(ni, &ct) != PTL_OK) return false;
    ptl_le_t e{};
    e.start = slots;
    e.length = sizeof slots;
    e.ct_handle = ct;
    e.uid = PTL_UID_ANY;
    e.options = PTL_LE_OP_PUT | PTL_LE_EVENT_CT_COMM | PTL_LE_EVENT_COMM_DISABLE |
                PTL_LE_EVENT_LINK_DISABLE;
    return PtlLEAppend(ni, pt, &e, PTL_PRIORITY_LIST, nullptr, &le) == PTL_OK;
  }
  bool initiator() {
    ptl_md_t d{};
    d.start = &out;
    d.length = sizeof out;
    d.eq_handle = eq;
    d.ct_handle = PTL_CT_NONE;
    return PtlMDBind(ni, &d, &md) == PTL_OK;
  }
  /// Puts `value` into slot `i` of rank 0, again while the target drops it
  /// (its entry may not be there yet); true once acknowledged.
  bool put(int i) {
    out = static_cast<std::uint64_t>(i);
    ptl_process_t t{};
    t.rank = 0;
    const auto until = Clock::now() + std::chrono::milliseconds(wait_ms);
    while (Clock::now() < until) {
      if (PtlPut(md, 0, sizeof out, PTL_ACK_REQ, t, pt_index, 0,
                 static_cast<ptl_size_t>(i) * sizeof out, nullptr, 0) != PTL_OK)
        return false;
      ptl_ni_fail_t acked = PTL_NI_UNDELIVERABLE;
      bool sent = false, answered = false;
      while (!answered) {
        ptl_event_t ev{};
        unsigned which = 0;
        if (PtlEQPoll(&eq, 1, wait_ms, &ev, &which) != PTL_OK) return false;
        if (ev.type == PTL_EVENT_SEND) sent = true;
        if (ev.type == PTL_EVENT_ACK) {
          answered = true;
          acked = ev.ni_fail_type;
        }
      }
      CHECK(sent);
      if (acked == PTL_NI_OK) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  void down() {
    PtlNIFini(ni);
    PtlFini();
  }
};

struct Ports {
  pier_port_t* port = nullptr;
  std::uint64_t buffers[8] = {};
  unsigned sends_done = 0;
  bool in_unknown = false;

  bool up(unsigned number) {
    return pier_port_init() == PIER_PORT_SUCCESS &&
           pier_port_open(&port, number) == PIER_PORT_SUCCESS;
  }
  bool provide() {
    for (auto& b : buffers)
      if (pier_port_provide_receive_buffer_with_tag(port, &b, message_size, PIER_PORT_LOW_PRIORITY,
                                                    0) != PIER_PORT_SUCCESS)
        return false;
    return true;
  }
  static void on_sent(pier_port_t*, void* ctx, pier_port_status_t st) {
    auto* self = static_cast<Ports*>(ctx);
    CHECK(self->in_unknown);
    CHECK(st == PIER_PORT_SUCCESS);
    ++self->sends_done;
  }
  /// Handles events until `done()` or the deadline; a receive's value goes
  /// to `*got` and its buffer back to the port.
  template <class Done>
  bool pump(Done done, std::uint64_t* got = nullptr) {
    const auto until = Clock::now() + std::chrono::milliseconds(wait_ms);
    while (!done()) {
      if (Clock::now() > until) return false;
      const pier_port_event_t* e = pier_port_receive(port);
      if (e->type == PIER_PORT_NO_RECV_EVENT) continue;
      if (e->type >= PIER_PORT_RECV_EVENT && e->type <= PIER_PORT_FAST_HIGH_PEER_RECV_EVENT &&
          got != nullptr) {
        std::memcpy(got, e->message, sizeof *got);
        got = nullptr;  // one per call
      }
      in_unknown = true;
      pier_port_unknown(port, e);  // gives a receive buffer back too
      in_unknown = false;
    }
    return true;
  }
  void linger(int ms) {
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    (void)pump([&] { return Clock::now() > until; });
  }
  void down() {
    pier_port_close(port);
    pier_port_finalize();
  }
};

int rank0() {
  Portals ptl;
  Ports ports;
  // In turn: nothing is called on an API that did not come up.
  CHECK(ptl.up() && ptl.target() && ports.up(client_port));
  if (errors) return errors;
  for (int i = 0; i < rounds && errors == 0; ++i) {
    ptl_ct_event_t v{};
    unsigned which = 0;
    const ptl_size_t want = static_cast<ptl_size_t>(i) + 1;
    CHECK(PtlCTPoll(&ptl.ct, &want, 1, wait_ms, &v, &which) == PTL_OK);
    CHECK(v.success == want && v.failure == 0);
    CHECK(ptl.slots[i] == static_cast<std::uint64_t>(i));
    std::uint64_t answer = ptl.slots[i];
    CHECK(pier_port_send_with_callback(ports.port, &answer, message_size, sizeof answer,
                                       PIER_PORT_LOW_PRIORITY, 1, server_port, Ports::on_sent,
                                       &ports) == PIER_PORT_SUCCESS);
    const unsigned want_sent = static_cast<unsigned>(i) + 1;
    CHECK(ports.pump([&] { return ports.sends_done >= want_sent; }));
  }
  ports.linger(200);  // the peer gets the acknowledgements we owe
  ports.down();
  ptl.down();
  return errors;
}

int rank1() {
  Ports ports;
  Portals ptl;
  CHECK(ptl.up() && ptl.initiator() && ports.up(server_port) && ports.provide());
  if (errors) return errors;
  for (int i = 0; i < rounds && errors == 0; ++i) {
    CHECK(ptl.put(i));
    std::uint64_t got = ~std::uint64_t{0};
    CHECK(ports.pump([&] { return got != ~std::uint64_t{0}; }, &got));
    CHECK(got == static_cast<std::uint64_t>(i));
  }
  ports.linger(200);
  ports.down();
  ptl.down();
  return errors;
}

}  // namespace

int main() {
  const char* r = std::getenv("PIER_RUN_RANK");
  const int rank = r ? std::atoi(r) : -1;
  if (rank != 0 && rank != 1) {
    std::fprintf(stderr, "both_job: run it as two ranks under pier-run\n");
    return 2;
  }
  const int rc = rank == 0 ? rank0() : rank1();
  if (rc == 0) std::printf("rank %d: ok\n", rank);
  return rc == 0 ? 0 : 1;
}
