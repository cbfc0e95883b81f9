// port_job: multi-process scenarios of the port layer through its C API,
// started by pier-run (tests/port/multiproc_test.cpp). Exit code 0 when every
// check held; each failed check prints one line. Every loop has a deadline.
//   port_job rules [G<n>]  2 ranks: G1-G10 and put/get across processes, or
//                      only the part that checks rule G<n>
//   port_job forward   3 ranks: each originates messages routed through the
//                      next rank, which forwards them on high priority
//   port_job death     2 ranks: rank 1 dies; rank 0 sees unreachable, resumes, drops
#include <pier/port.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

int errors = 0;
#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      ++errors;                                                                               \
      std::fprintf(stderr, "port_job: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                                         \
  } while (0)

using Clock = std::chrono::steady_clock;

struct Sent {
  unsigned done = 0;
  std::vector<pier_port_status_t> statuses;
};
bool in_unknown = false;

void on_sent(pier_port_t*, void* ctx, pier_port_status_t st) {
  CHECK(in_unknown);  // G3: callbacks run only inside pier_port_unknown()
  auto* s = static_cast<Sent*>(ctx);
  ++s->done;
  s->statuses.push_back(st);
}

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<unsigned char>((i * 131 + seed * 7) & 0xff);
  return v;
}

enum class Wait { poll, block, no_spin };
Wait wait_mode = Wait::poll;
/// The blocking receives' timeout, and the longest call that returned an
/// event (G9: a blocking receive returns when an event comes, not at its
/// timeout).
unsigned block_ms = 50;
double longest_event_wait_ms = 0;

/// Polls until pred() holds or `ms` pass; receive events go to on_recv,
/// every other event to pier_port_unknown(). The receive call is the
/// process's wait_mode (G9: the blocking forms wake for every event).
bool pump(pier_port_t* p, const std::function<void(const pier_port_event_t&)>& on_recv,
          const std::function<bool()>& pred, int ms = 20000) {
  auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (!pred()) {
    if (Clock::now() > until) return false;
    const auto called = Clock::now();
    const pier_port_event_t* e = wait_mode == Wait::block ? pier_port_blocking_receive(p, block_ms)
                                 : wait_mode == Wait::no_spin
                                     ? pier_port_blocking_receive_no_spin(p, block_ms)
                                     : pier_port_receive(p);
    if (e->type == PIER_PORT_NO_RECV_EVENT) continue;
    longest_event_wait_ms =
        std::max(longest_event_wait_ms,
                 std::chrono::duration<double, std::milli>(Clock::now() - called).count());
    if (e->type >= PIER_PORT_RECV_EVENT && e->type <= PIER_PORT_FAST_HIGH_PEER_RECV_EVENT)
      on_recv(*e);
    else {
      in_unknown = true;
      pier_port_unknown(p, e);
      in_unknown = false;
    }
  }
  return true;
}

/// Keeps answering for `ms` so the peers get our last acknowledgements.
void linger(pier_port_t* p, const std::function<void(const pier_port_event_t&)>& on_recv, int ms) {
  (void)pump(
      p, on_recv, [] { return false; }, ms);
}

unsigned send_size(std::size_t len) {
  return pier_port_min_size_for_length(len);
}

// ---- rules: rank 0 is the client (port 1), rank 1 the server (port 2)

/// Whether the client runs the part of rule `r` (all parts when no rule was
/// named). Each rule is its own test (tests/port/multiproc_test.cpp).
std::string rule;
bool part(const char* r) {
  return rule.empty() || rule == r;
}

/// The bye: counts of low and high size-4 sends, one spare word (12 bytes:
/// size class 5).
constexpr std::size_t bye_length = 12;

int rules_server(pier_port_t* p) {
  // Each buffer's tag is its index: an event must name that very buffer,
  // with its size and priority (G4, G5).
  std::vector<std::vector<unsigned char>> bufs;
  struct Kind {
    unsigned size, priority;
  };
  std::vector<Kind> kinds;
  auto provide = [&](unsigned size, unsigned prio, unsigned count) {
    for (unsigned i = 0; i < count; ++i) {
      const auto tag = static_cast<unsigned>(bufs.size());
      bufs.emplace_back(pier_port_max_length_for_size(size) + 1);
      kinds.push_back({size, prio});
      CHECK(pier_port_provide_receive_buffer_with_tag(p, bufs.back().data(), size, prio, tag) ==
            PIER_PORT_SUCCESS);
    }
  };
  bufs.reserve(64);
  provide(4, PIER_PORT_LOW_PRIORITY, 8);
  provide(4, PIER_PORT_HIGH_PRIORITY, 4);
  provide(5, PIER_PORT_HIGH_PRIORITY, 1);  // the bye: how many low and high size-4 sends
  for (unsigned s : {7u, 12u, 16u, 21u, 23u}) provide(s, PIER_PORT_LOW_PRIORITY, 1);
  CHECK(pier_port_receive_tokens_held(p) == pier_port_num_receive_tokens(p) - 18);

  std::vector<unsigned char> memory = pattern(1 << 20, 42);
  CHECK(pier_port_register_memory(p, memory.data(), memory.size()) == PIER_PORT_SUCCESS);
  std::uint64_t addr = reinterpret_cast<std::uintptr_t>(memory.data());
  Sent hello;
  CHECK(pier_port_send_with_callback(p, &addr, 4, 8, PIER_PORT_HIGH_PRIORITY, 0, 1, on_sent,
                                     &hello) == PIER_PORT_SUCCESS);
  std::uint32_t next[2] = {0, 0};
  std::uint32_t sent[2] = {0, 0};
  bool bye = false;
  auto on_recv = [&](const pier_port_event_t& e) {
    // G5: the buffer comes back with its tag; G4: of the message's size
    // class and priority.
    CHECK(e.tag < bufs.size());
    if (e.tag >= bufs.size()) return;
    CHECK(e.buffer == bufs[e.tag].data());
    CHECK(e.size == kinds[e.tag].size && e.priority == kinds[e.tag].priority);
    if (e.size == 5) {  // kept: its receive token comes back to us
      CHECK(e.length == bye_length && e.priority == PIER_PORT_HIGH_PRIORITY);
      std::memcpy(sent, e.message, sizeof sent);
      bye = true;
      return;
    }
    if (e.size == 4) {
      std::uint32_t v;
      std::memcpy(&v, e.message, 4);
      CHECK(v == next[e.priority]);  // G6: order per priority
      next[e.priority] = v + 1;
    } else {
      CHECK(e.size == pier_port_min_size_for_length(e.length));  // G4
      auto want = pattern(e.length, e.length);
      CHECK(std::memcmp(e.message, want.data(), e.length) == 0);  // G7
    }
    // Give the buffer back (G2: the token goes to pier).
    pier_port_unknown(p, &e);
  };
  CHECK(pump(
      p, on_recv, [&] { return bye && hello.done == 1; }, 60000));
  // G9: every call that returned an event did so well before its timeout
  // (5 s in this rule's run, with 300 ms of silence before the client's
  // next message).
  if (rule == "G9") CHECK(longest_event_wait_ms < 2000);
  block_ms = 50;
  linger(p, on_recv, 300);
  CHECK(next[0] == sent[0] && next[1] == sent[1]);  // G6: none lost, none twice
  // G2: buffers handed back through pier_port_unknown() keep their tokens
  // with pier; the bye's came back to us with its event.
  CHECK(pier_port_receive_tokens_held(p) == pier_port_num_receive_tokens(p) - 17);
  return errors;
}

int rules_client(pier_port_t* p) {
  const unsigned total = pier_port_num_send_tokens(p);
  std::vector<unsigned char> hb(16);
  CHECK(pier_port_provide_receive_buffer_with_tag(p, hb.data(), 4, PIER_PORT_HIGH_PRIORITY, 0) ==
        PIER_PORT_SUCCESS);
  // G2: the buffer took a receive token; the event gives it back.
  CHECK(pier_port_receive_tokens_held(p) == pier_port_num_receive_tokens(p) - 1);
  std::uint64_t server_memory = 0;
  auto on_recv = [&](const pier_port_event_t& e) {
    std::memcpy(&server_memory, e.message, 8);
    CHECK(e.sender_node_id == 1 && e.sender_port_id == 2);
  };
  CHECK(pump(p, on_recv, [&] { return server_memory != 0; }));
  CHECK(pier_port_receive_tokens_held(p) == pier_port_num_receive_tokens(p));

  std::vector<std::uint32_t> seq(200);
  unsigned n = 0, h = 0;
  // G3: a send's callback runs only inside pier_port_unknown() (on_sent
  // checks it): a client that does not receive never gets it.
  if (part("G3")) {
    Sent s0;
    seq[n] = n;
    CHECK(pier_port_send_with_callback(p, &seq[n], 4, 4, PIER_PORT_LOW_PRIORITY, 1, 2, on_sent,
                                       &s0) == PIER_PORT_SUCCESS);
    ++n;
    ::usleep(200 * 1000);  // long enough for the send and its ack
    CHECK(s0.done == 0 && pier_port_send_tokens_held(p) == total - 1);
    CHECK(pump(p, on_recv, [&] { return s0.done == 1; }));
    CHECK(s0.statuses.size() == 1 && s0.statuses[0] == PIER_PORT_SUCCESS);
  }
  // G9: the server sleeps in its blocking receive; a send after a quiet
  // while must wake it (the bye below waits for its answer).
  if (part("G9")) ::usleep(300 * 1000);
  // G1: every send takes a token until none is left; none comes back
  // before its callback. G5: the server checks each buffer's tag.
  Sent s1;
  const unsigned first = n;
  const bool tokens = part("G1") || part("G5");
  for (; tokens && n < first + total && n < 100; ++n) {
    seq[n] = n;
    CHECK(pier_port_send_with_callback(p, &seq[n], 4, 4, PIER_PORT_LOW_PRIORITY, 1, 2, on_sent,
                                       &s1) == PIER_PORT_SUCCESS);
    CHECK(pier_port_send_tokens_held(p) == total - (n - first) - 1);
  }
  if (tokens && n - first == total) {  // none left: the next send is refused, nothing changes
    CHECK(pier_port_send_with_callback(p, &seq[0], 4, 4, PIER_PORT_LOW_PRIORITY, 1, 2, on_sent,
                                       &s1) == PIER_PORT_NO_TOKEN);
    CHECK(pier_port_send_tokens_held(p) == 0);
  }
  CHECK(pump(p, on_recv, [&] { return s1.done == n - first; }));
  CHECK(pier_port_send_tokens_held(p) == total);
  // G6: up to 200 low and 50 high in order, as fast as tokens allow.
  std::vector<std::uint32_t> hseq(50);
  Sent s2;
  const unsigned low_before = n;
  if (part("G6")) {
    CHECK(pump(
        p, on_recv,
        [&] {
          while (pier_port_send_tokens_held(p) > 0 && (n < 200 || h < 50)) {
            if (h < 50 && (n >= 200 || n % 4 == 0)) {
              hseq[h] = h;
              CHECK(pier_port_send_with_callback(p, &hseq[h], 4, 4, PIER_PORT_HIGH_PRIORITY, 1, 2,
                                                 on_sent, &s2) == PIER_PORT_SUCCESS);
              ++h;
            } else {
              seq[n] = n;
              CHECK(pier_port_send_with_callback(p, &seq[n], 4, 4, PIER_PORT_LOW_PRIORITY, 1, 2,
                                                 on_sent, &s2) == PIER_PORT_SUCCESS);
              ++n;
            }
          }
          return s2.done == (200 - low_before) + 50;
        },
        60000));
    for (auto st : s2.statuses) CHECK(st == PIER_PORT_SUCCESS);
  }
  // G7: sizes up to 4 MiB arrive intact; G4: each in the buffer of its
  // size class (both checked by the server).
  if (part("G7") || part("G4")) {
    std::vector<std::vector<unsigned char>> msgs;
    Sent s3;
    for (std::size_t len : {100u, 4088u, 40000u, 1u << 20, 4u << 20}) {
      msgs.push_back(pattern(len, static_cast<unsigned>(len)));
      CHECK(pier_port_send_with_callback(p, msgs.back().data(), send_size(len), len,
                                         PIER_PORT_LOW_PRIORITY, 1, 2, on_sent,
                                         &s3) == PIER_PORT_SUCCESS);
    }
    CHECK(pump(
        p, on_recv, [&] { return s3.done == 5; }, 60000));
    for (auto st : s3.statuses) CHECK(st == PIER_PORT_SUCCESS);
  }
  // G7: put and get into the server's registered memory.
  if (part("G7")) {
    auto data = pattern(5000, 5);
    std::vector<unsigned char> back(5000);
    Sent s4;
    CHECK(pier_port_put(p, data.data(), server_memory + 1000, data.size(), PIER_PORT_HIGH_PRIORITY,
                        1, 2, on_sent, &s4) == PIER_PORT_SUCCESS);
    CHECK(pier_port_get(p, server_memory + 1000, back.data(), back.size(), PIER_PORT_HIGH_PRIORITY,
                        1, 2, on_sent, &s4) == PIER_PORT_SUCCESS);
    CHECK(pump(p, on_recv, [&] { return s4.done == 2; }));
    CHECK(back == data);
  }
  // G8: no buffer of size 10 at the server: the send times out rather than
  // hang; G10: resume_sending re-enables the connection.
  if (part("G8") || part("G10")) {
    auto ten = pattern(700, 1);
    Sent s5, s6;
    CHECK(pier_port_send_with_callback(p, ten.data(), 10, ten.size(), PIER_PORT_LOW_PRIORITY, 1, 2,
                                       on_sent, &s5) == PIER_PORT_SUCCESS);
    CHECK(pump(p, on_recv, [&] { return s5.done == 1; }));
    CHECK(s5.statuses.size() == 1 && s5.statuses[0] == PIER_PORT_SEND_TIMED_OUT);
    CHECK(pier_port_resume_sending(p, PIER_PORT_LOW_PRIORITY, 1, 2, on_sent, &s6) ==
          PIER_PORT_SUCCESS);
    CHECK(pump(p, on_recv, [&] { return s6.done == 1; }));
    CHECK(s6.statuses.size() == 1 && s6.statuses[0] == PIER_PORT_SUCCESS);
    // The connection takes sends again (the server sees it in the order).
    Sent s6b;
    seq[n] = n;
    CHECK(pier_port_send_with_callback(p, &seq[n], 4, 4, PIER_PORT_LOW_PRIORITY, 1, 2, on_sent,
                                       &s6b) == PIER_PORT_SUCCESS);
    ++n;
    CHECK(pump(p, on_recv, [&] { return s6b.done == 1; }));
    CHECK(s6b.statuses.size() == 1 && s6b.statuses[0] == PIER_PORT_SUCCESS);
  }
  // G10: a closed port: failure, then drop_sends completes the queued one.
  if (part("G10")) {
    Sent s7, s8;
    CHECK(pier_port_send_with_callback(p, seq.data(), 4, 4, PIER_PORT_LOW_PRIORITY, 1, 9, on_sent,
                                       &s7) == PIER_PORT_SUCCESS);
    CHECK(pump(p, on_recv, [&] { return s7.done == 1; }));
    CHECK(s7.statuses.size() == 1 && s7.statuses[0] == PIER_PORT_SEND_TARGET_PORT_CLOSED);
    CHECK(pier_port_send_with_callback(p, seq.data(), 4, 4, PIER_PORT_LOW_PRIORITY, 1, 9, on_sent,
                                       &s7) == PIER_PORT_SUCCESS);
    CHECK(pier_port_drop_sends(p, PIER_PORT_LOW_PRIORITY, 1, 9, on_sent, &s8) == PIER_PORT_SUCCESS);
    CHECK(pump(p, on_recv, [&] { return s7.done == 2 && s8.done == 1; }));
    CHECK(s7.statuses.size() == 2 && s8.statuses.size() == 1);
    CHECK(s7.statuses.size() == 2 && s7.statuses[1] == PIER_PORT_SEND_DROPPED);
    CHECK(s8.statuses.size() == 1 && s8.statuses[0] == PIER_PORT_SUCCESS);
  }
  // The high connection still works after all that; the bye tells the
  // server how many size-4 sends to expect.
  const std::uint32_t counts[3] = {n, h, 0};
  Sent s9;
  CHECK(pier_port_send_with_callback(p, counts, 5, bye_length, PIER_PORT_HIGH_PRIORITY, 1, 2,
                                     on_sent, &s9) == PIER_PORT_SUCCESS);
  CHECK(pump(p, on_recv, [&] { return s9.done == 1; }));
  CHECK(s9.statuses.size() == 1 && s9.statuses[0] == PIER_PORT_SUCCESS);
  CHECK(pier_port_send_tokens_held(p) == total);
  return errors;
}

// ---- forward: rank r originates `count` messages for (r + 2) % 3, routed
// through (r + 1) % 3, which forwards them on high priority. Buffers are
// bounded (2 low, 2 high); a forwarder gives a low buffer back only after the
// high send that forwards its message completed (GM's convention), and always
// gives high buffers back at once.

int forward(pier_port_t* p, unsigned rank) {
  constexpr unsigned count = 500;
  constexpr unsigned slots = 2;
  const unsigned next = (rank + 1) % 3, origin = (rank + 1) % 3;
  struct Msg {
    std::uint32_t origin, seq;
  };
  std::vector<Msg> low_bufs(slots * 2), high_bufs(slots * 2);
  for (unsigned i = 0; i < slots; ++i) {
    CHECK(pier_port_provide_receive_buffer_with_tag(p, &low_bufs[i * 2], 4, PIER_PORT_LOW_PRIORITY,
                                                    i) == PIER_PORT_SUCCESS);
    CHECK(pier_port_provide_receive_buffer_with_tag(
              p, &high_bufs[i * 2], 4, PIER_PORT_HIGH_PRIORITY, i) == PIER_PORT_SUCCESS);
  }
  struct Forward {
    Msg msg;
    void* low_buffer;
    unsigned tag;
    pier_port_t* port;
    unsigned* done;
  };
  std::vector<Forward> fwd(slots);
  std::vector<Forward*> pending;  // received, not yet forwarded (no token)
  unsigned forwarded_done = 0, received = 0, originated = 0;
  std::uint32_t expect = 0;
  Sent mine;
  std::vector<Msg> out(count);
  auto forwarded = [](pier_port_t* port, void* ctx, pier_port_status_t st) {
    auto* f = static_cast<Forward*>(ctx);
    if (st != PIER_PORT_SUCCESS) std::fprintf(stderr, "port_job: forward failed: %d\n", st);
    ++*f->done;
    // Only now does the low buffer go back.
    (void)pier_port_provide_receive_buffer_with_tag(port, f->low_buffer, 4, PIER_PORT_LOW_PRIORITY,
                                                    f->tag);
    f->low_buffer = nullptr;
  };
  auto on_recv = [&](const pier_port_event_t& e) {
    Msg m;
    std::memcpy(&m, e.message, sizeof m);
    if (e.priority == PIER_PORT_HIGH_PRIORITY) {
      CHECK(m.origin == origin && m.seq == expect);  // in order, from the right origin
      ++expect;
      ++received;
      pier_port_unknown(p, &e);  // high buffers go back at once
      return;
    }
    Forward* f = nullptr;
    for (auto& x : fwd)
      if (x.low_buffer == nullptr) f = &x;
    CHECK(f != nullptr);  // one slot per low buffer: never more in flight
    if (!f) return;
    *f = Forward{m, e.buffer, e.tag, p, &forwarded_done};
    pending.push_back(f);
  };
  const bool ok = pump(
      p, on_recv,
      [&] {
        while (!pending.empty() && pier_port_send_tokens_held(p) > 0) {
          Forward* f = pending.front();
          pending.erase(pending.begin());
          CHECK(pier_port_send_with_callback(p, &f->msg, 4, sizeof f->msg, PIER_PORT_HIGH_PRIORITY,
                                             next, 1, forwarded, f) == PIER_PORT_SUCCESS);
        }
        while (originated < count && pier_port_send_tokens_held(p) > 1) {
          out[originated] = Msg{rank, originated};
          CHECK(pier_port_send_with_callback(p, &out[originated], 4, sizeof(Msg),
                                             PIER_PORT_LOW_PRIORITY, next, 1, on_sent,
                                             &mine) == PIER_PORT_SUCCESS);
          ++originated;
        }
        return mine.done == count && forwarded_done == count && received == count;
      },
      60000);
  CHECK(ok);
  if (!ok)
    std::fprintf(stderr, "port_job: rank %u: sent %u/%u forwarded %u received %u\n", rank,
                 mine.done, count, forwarded_done, received);
  for (auto st : mine.statuses) CHECK(st == PIER_PORT_SUCCESS);
  linger(p, on_recv, 500);
  return errors;
}

// ---- death: rank 1 dies after one message; rank 0's sends then fail as
// unreachable, and resume/drop still give their tokens back.

int death(pier_port_t* p, unsigned rank) {
  std::vector<unsigned char> buf(64);
  if (rank == 1) {
    CHECK(pier_port_provide_receive_buffer_with_tag(p, buf.data(), 4, 0, 0) == PIER_PORT_SUCCESS);
    bool got = false;
    CHECK(pump(
        p, [&](const pier_port_event_t&) { got = true; }, [&] { return got; }));
    linger(
        p, [](const pier_port_event_t&) {}, 200);
    std::fflush(stderr);
    ::_exit(errors);  // no goodbye: the peer must notice on its own
  }
  auto ignore = [](const pier_port_event_t&) {};
  Sent s1;
  std::uint64_t v = 1;
  CHECK(pier_port_send_with_callback(p, &v, 4, 8, 0, 1, 1, on_sent, &s1) == PIER_PORT_SUCCESS);
  CHECK(pump(p, ignore, [&] { return s1.done == 1; }));
  CHECK(s1.statuses[0] == PIER_PORT_SUCCESS);
  // Keep sending until the death shows; each failure is one resume.
  Sent s2, s3;
  unsigned failures = 0;
  auto until = Clock::now() + std::chrono::seconds(30);
  while (failures == 0 && Clock::now() < until) {
    CHECK(pier_port_send_with_callback(p, &v, 4, 8, 0, 1, 1, on_sent, &s2) == PIER_PORT_SUCCESS);
    const unsigned before = s2.done;
    CHECK(pump(p, ignore, [&] { return s2.done > before; }));
    for (auto st : s2.statuses) failures += st != PIER_PORT_SUCCESS;
    s2.statuses.clear();
  }
  CHECK(failures == 1);
  CHECK(pier_port_drop_sends(p, 0, 1, 1, on_sent, &s3) == PIER_PORT_SUCCESS);
  CHECK(pump(p, ignore, [&] { return s3.done == 1; }));
  CHECK(s3.statuses[0] == PIER_PORT_SUCCESS);
  CHECK(pier_port_send_tokens_held(p) == pier_port_num_send_tokens(p));
  return errors;
}

/// A node whose every port is closed still answers: rank 1 closes its only
/// port and stops calling pier; sends from rank 0 to that number and to one
/// never opened come back "port closed" well before the send timeout.
int idle(pier_port_t*& p, unsigned rank) {
  auto ignore = [](const pier_port_event_t&) {};
  std::uint64_t v = 7;
  if (rank == 1) {
    Sent ready;
    CHECK(pier_port_send_with_callback(p, &v, 4, 8, 0, 0, 1, on_sent, &ready) == PIER_PORT_SUCCESS);
    CHECK(pump(p, ignore, [&] { return ready.done == 1; }));
    pier_port_close(p);
    p = nullptr;
    // Out of pier until rank 0 is done (its answers need no call here).
    std::this_thread::sleep_for(std::chrono::seconds(4));
    return errors;
  }
  std::vector<unsigned char> buf(64);
  CHECK(pier_port_provide_receive_buffer_with_tag(p, buf.data(), 4, 0, 0) == PIER_PORT_SUCCESS);
  bool got = false;
  CHECK(pump(
      p, [&](const pier_port_event_t&) { got = true; }, [&] { return got; }));
  for (unsigned target_port : {1u, 5u}) {
    Sent s, dropped;
    CHECK(pier_port_send_with_callback(p, &v, 4, 8, 0, 1, target_port, on_sent, &s) ==
          PIER_PORT_SUCCESS);
    // PIER_PORT_SEND_TIMEOUT_MS is 20 s in this run: a timeout cannot pass.
    CHECK(pump(
        p, ignore, [&] { return s.done == 1; }, 2500));
    CHECK(s.done == 1 && s.statuses[0] == PIER_PORT_SEND_TARGET_PORT_CLOSED);
    CHECK(pier_port_drop_sends(p, 0, 1, target_port, on_sent, &dropped) == PIER_PORT_SUCCESS);
    CHECK(pump(p, ignore, [&] { return dropped.done == 1; }));
  }
  CHECK(pier_port_send_tokens_held(p) == pier_port_num_send_tokens(p));
  return errors;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: port_job rules [G1..G10]|forward|death|idle\n");
    return 2;
  }
  const std::string scenario = argv[1];
  if (scenario == "rules" && argc > 2) {
    rule = argv[2];
    bool known = false;
    for (int g = 1; g <= 10; ++g) known |= rule == "G" + std::to_string(g);
    if (!known) {
      std::fprintf(stderr, "port_job: no rule %s (G1 to G10)\n", rule.c_str());
      return 2;
    }
  }
  if (pier_port_init() != PIER_PORT_SUCCESS) {
    std::fprintf(stderr, "port_job: pier_port_init failed\n");
    return 3;
  }
  pier_port_t* port = nullptr;
  unsigned rank = 0, max_node = 0;
  const unsigned port_id = scenario == "rules" ? 0 : 1;
  pier_port_status_t st = pier_port_open(&port, port_id);
  if (st != PIER_PORT_SUCCESS) {
    std::fprintf(stderr, "port_job: open: %s\n", pier_port_strerror(st));
    return 3;
  }
  CHECK(pier_port_get_node_id(port, &rank) == PIER_PORT_SUCCESS);
  CHECK(pier_port_max_node_id(port, &max_node) == PIER_PORT_SUCCESS);
  pier_port_t* again = nullptr;
  CHECK(pier_port_open(&again, port_id) == PIER_PORT_BUSY);
  char host[256];
  unsigned back = 99;
  CHECK(pier_port_get_host_name(port, host, sizeof host) == PIER_PORT_SUCCESS);
  CHECK(pier_port_host_name_to_node_id(port, host, &back) == PIER_PORT_SUCCESS && back == 0);
  CHECK(pier_port_global_id(port) == ((rank << 16) | port_id));
  int rc = 0;
  // Servers sleep in the blocking receives, clients poll (G9 across processes).
  wait_mode = rank == 0 ? Wait::poll : rank == 1 ? Wait::block : Wait::no_spin;
  if (scenario == "rules" && rule == "G9" && rank == 1) block_ms = 5000;
  if (scenario == "rules") {
    // The server's port is 2, the client's 1: reopen under the right number.
    pier_port_close(port);
    CHECK(pier_port_open(&port, rank == 0 ? 1 : 2) == PIER_PORT_SUCCESS);
    rc = rank == 0 ? rules_client(port) : rules_server(port);
  } else if (scenario == "forward") {
    rc = max_node == 2 ? forward(port, rank) : 4;
  } else if (scenario == "death") {
    rc = death(port, rank);
  } else if (scenario == "idle") {
    rc = idle(port, rank);
  } else {
    rc = 2;
  }
  if (port != nullptr) pier_port_close(port);
  pier_port_finalize();
  if (rc != 0) std::fprintf(stderr, "port_job: rank %u: %d failed checks\n", rank, rc);
  return rc == 0 ? 0 : 1;
}
