// portals_rules_job RULE [logical|physical]: the two sides of one rule of
// PORTALS4.md §6 across two processes (see rules_job.hpp), started by
// `pier-run -n 2`. Prints "rank R: ok" and exits 0 when every check held.
#include "rules_job.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <thread>

namespace pier::portals::rules {

void Job::fail(int line, const char* what) {
  ++errors;
  std::fprintf(stderr, "rank %d: %s: line %d: check failed: %s\n", rank, rule, line, what);
}

void Job::fail_value(int line, const char* what, long long seen, long long want) {
  ++errors;
  std::fprintf(stderr, "rank %d: %s: line %d: %s: seen %lld (0x%llx), expected %lld (0x%llx)\n",
               rank, rule, line, what, seen, static_cast<unsigned long long>(seen), want,
               static_cast<unsigned long long>(want));
}

bool Job::sync() {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(wait_ms());
  ++syncs;
  // Our zero-byte put, repeated while it is dropped: the peer may not have
  // appended its handshake entry yet (only the first time).
  for (;;) {
    if (PtlCTSet(sync_acks, ptl_ct_event_t{0, 0}) != PTL_OK ||
        PtlPut(sync_md, 0, 0, PTL_CT_ACK_REQ, peer, sync_pt, 0, 0, nullptr, 0) != PTL_OK) {
      fail(__LINE__, "handshake put");
      return false;
    }
    ptl_size_t one = 1;
    ptl_ct_event_t v{};
    unsigned which = 0;
    if (PtlCTPoll(&sync_acks, &one, 1, wait_ms(), &v, &which) != PTL_OK) {
      fail(__LINE__, "handshake ack within the deadline");
      return false;
    }
    if (v.success == 1) break;
    if (Clock::now() > deadline) {
      fail(__LINE__, "handshake put accepted by the peer within the deadline");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // The peer's put of the same round.
  ptl_ct_event_t v{};
  unsigned which = 0;
  if (PtlCTPoll(&sync_arrivals, &syncs, 1, wait_ms(), &v, &which) != PTL_OK) {
    fail_value(__LINE__, "handshake puts from the peer", static_cast<long long>(v.success),
               static_cast<long long>(syncs));
    return false;
  }
  return true;
}

ptl_process_t Job::any_id() const {
  ptl_process_t p{};
  if (logical) {
    p.rank = PTL_RANK_ANY;
  } else {
    p.phys.nid = PTL_NID_ANY;
    p.phys.pid = PTL_PID_ANY;
  }
  return p;
}

ptl_me_t Job::me_for(void* start, ptl_size_t length, unsigned options, ptl_match_bits_t bits,
                     ptl_match_bits_t ignore, ptl_handle_ct_t ct) const {
  ptl_me_t m{};
  m.start = start;
  m.length = length;
  m.ct_handle = ct;
  m.uid = PTL_UID_ANY;
  m.options = options;
  m.match_id = any_id();
  m.match_bits = bits;
  m.ignore_bits = ignore;
  return m;
}

ptl_handle_me_t Job::append(const ptl_me_t& m, ptl_list_t list, void* tag, ptl_pt_index_t pt) {
  ptl_handle_me_t h = PTL_INVALID_HANDLE;
  const int rc = PtlMEAppend(ni, pt, &m, list, tag, &h);
  if (rc != PTL_OK) fail_value(__LINE__, "PtlMEAppend", rc, PTL_OK);
  return h;
}

ptl_handle_me_t Job::add(const ptl_me_t& m, ptl_list_t list, void* tag, ptl_pt_index_t pt) {
  const ptl_handle_me_t h = append(m, list, tag, pt);
  if (h == PTL_INVALID_HANDLE) return h;
  const ptl_event_t link = expect(teq, PTL_EVENT_LINK, __LINE__);
  check_eq(__LINE__, "LINK user_ptr", link.user_ptr, tag);
  return h;
}

bool Job::check_bytes(int line, const char* what, const void* seen, const void* want,
                      std::size_t n) {
  const auto* s = static_cast<const unsigned char*>(seen);
  const auto* w = static_cast<const unsigned char*>(want);
  for (std::size_t i = 0; i < n; ++i)
    if (s[i] != w[i]) {
      std::fprintf(stderr, "rank %d: %s: line %d: %s: byte %zu of %zu is %d, expected %d\n", rank,
                   rule, line, what, i, n, s[i], w[i]);
      ++errors;
      return false;
    }
  return true;
}

ptl_handle_md_t Job::bind_to(void* start, ptl_size_t length, unsigned options, ptl_handle_eq_t eq,
                             ptl_handle_ct_t ct) {
  ptl_md_t d{start, length, options, eq, ct};
  ptl_handle_md_t h = PTL_INVALID_HANDLE;
  const int rc = PtlMDBind(ni, &d, &h);
  if (rc != PTL_OK) fail_value(__LINE__, "PtlMDBind", rc, PTL_OK);
  return h;
}

ptl_handle_md_t Job::bind(void* start, ptl_size_t length, unsigned options, ptl_handle_ct_t ct) {
  return bind_to(start, length, options, ieq, ct);
}

ptl_handle_ct_t Job::new_ct() {
  ptl_handle_ct_t ct = PTL_INVALID_HANDLE;
  const int rc = PtlCTAlloc(ni, &ct);
  if (rc != PTL_OK) fail_value(__LINE__, "PtlCTAlloc", rc, PTL_OK);
  return ct;
}

ptl_event_t Job::next(ptl_handle_eq_t eq, int line) {
  ptl_event_t ev{};
  unsigned which = 0;
  const int rc = PtlEQPoll(&eq, 1, wait_ms(), &ev, &which);
  if (rc != PTL_OK) {
    fail_value(line, "an event within the deadline (PtlEQPoll)", rc, PTL_OK);
    ev.type = no_event;
  }
  return ev;
}

ptl_event_t Job::expect(ptl_handle_eq_t eq, ptl_event_kind_t kind, int line) {
  ptl_event_t ev = next(eq, line);
  if (ev.type != no_event) check_eq(line, "event kind", ev.type, kind);
  return ev;
}

void Job::expect_quiet(ptl_handle_eq_t eq, int line) {
  ptl_event_t ev{};
  unsigned which = 0;
  const int rc = PtlEQPoll(&eq, 1, quiet_ms, &ev, &which);
  if (rc != PTL_EQ_EMPTY) fail_value(line, "no further event; one came of kind", ev.type, -1);
}

ptl_ct_event_t Job::ct_reach(ptl_handle_ct_t ct, ptl_size_t test, int line) {
  ptl_ct_event_t v{};
  unsigned which = 0;
  const int rc = PtlCTPoll(&ct, &test, 1, wait_ms(), &v, &which);
  if (rc != PTL_OK) {
    PtlCTGet(ct, &v);
    fail_value(line, "counter success reaching the test within the deadline",
               static_cast<long long>(v.success), static_cast<long long>(test));
  }
  return v;
}

void Job::ct_stays(ptl_handle_ct_t ct, ptl_ct_event_t want, int line) {
  std::this_thread::sleep_for(std::chrono::milliseconds(quiet_ms));
  const ptl_ct_event_t v = ct_get(ct);
  check_eq(line, "counter success", v.success, want.success);
  check_eq(line, "counter failure", v.failure, want.failure);
}

ptl_ct_event_t Job::ct_get(ptl_handle_ct_t ct) {
  ptl_ct_event_t v{};
  const int rc = PtlCTGet(ct, &v);
  if (rc != PTL_OK) fail_value(__LINE__, "PtlCTGet", rc, PTL_OK);
  return v;
}

ptl_sr_value_t Job::status(ptl_sr_index_t reg) {
  ptl_sr_value_t v = -1;
  const int rc = PtlNIStatus(ni, reg, &v);
  if (rc != PTL_OK) fail_value(__LINE__, "PtlNIStatus", rc, PTL_OK);
  return v;
}

ptl_event_t Job::put_acked(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length,
                           ptl_match_bits_t bits, ptl_size_t remote_offset, int line,
                           ptl_hdr_data_t hdr, ptl_pt_index_t pt) {
  ptl_event_t none{};
  none.type = no_event;
  const int rc =
      PtlPut(md, local_offset, length, PTL_ACK_REQ, peer, pt, bits, remote_offset, nullptr, hdr);
  if (rc != PTL_OK) {
    fail_value(line, "PtlPut", rc, PTL_OK);
    return none;
  }
  const ptl_event_t send = expect(ieq, PTL_EVENT_SEND, line);
  check_eq(line, "SEND ni_fail_type", send.ni_fail_type, PTL_NI_OK);
  return expect(ieq, PTL_EVENT_ACK, line);
}

ptl_event_t Job::get_reply(ptl_handle_md_t md, ptl_size_t local_offset, ptl_size_t length,
                           ptl_match_bits_t bits, ptl_size_t remote_offset, int line,
                           ptl_pt_index_t pt) {
  ptl_event_t none{};
  none.type = no_event;
  const int rc = PtlGet(md, local_offset, length, peer, pt, bits, remote_offset, nullptr);
  if (rc != PTL_OK) {
    fail_value(line, "PtlGet", rc, PTL_OK);
    return none;
  }
  return expect(ieq, PTL_EVENT_REPLY, line);
}

void Job::check_initiator(const ptl_event_t& ev, int line) {
  if (logical) {
    check_eq(line, "initiator.rank", ev.initiator.rank, peer.rank);
  } else {
    check_eq(line, "initiator.phys.nid", ev.initiator.phys.nid, peer_phys.phys.nid);
    check_eq(line, "initiator.phys.pid", ev.initiator.phys.pid, peer_phys.phys.pid);
  }
}

namespace {

const Rule* find_rule(const char* name) {
  for (const Rule* group :
       {addressing_rules, matching_rules, offset_rules, unexpected_rules, event_rules, ack_rules,
        counting_rules, triggered_rules, atomic_rules, limit_rules})
    for (const Rule* r = group; r->name != nullptr; ++r)
      if (std::strcmp(r->name, name) == 0) return r;
  return nullptr;
}

/// The NI, the rule's index and queues, and the handshake entry.
bool bring_up(Job& j, const Rule& rule) {
  const char* rank_text = std::getenv("PIER_RUN_RANK");
  const int env_rank = rank_text ? std::atoi(rank_text) : 0;
  j.matching = rule.matching;
  const unsigned options = (j.matching ? PTL_NI_MATCHING : PTL_NI_NO_MATCHING) |
                           (j.logical ? PTL_NI_LOGICAL : PTL_NI_PHYSICAL);
  ptl_ni_limits_t tuned{};
  const ptl_ni_limits_t* desired = nullptr;
  if (rule.tune_limits != nullptr && env_rank == 0) {
    // A field at zero asks for the minimum, so start from the defaults
    // that a first NI reports.
    ptl_handle_ni_t probe;
    const int rc = PtlNIInit(PTL_IFACE_DEFAULT, options, PTL_PID_ANY, nullptr, &tuned, &probe);
    if (rc != PTL_OK) return j.fail_value(__LINE__, "PtlNIInit", rc, PTL_OK), false;
    PtlNIFini(probe);
    rule.tune_limits(tuned);
    desired = &tuned;
  }
  int rc = PtlNIInit(PTL_IFACE_DEFAULT, options, PTL_PID_ANY, desired, &j.limits, &j.ni);
  if (rc != PTL_OK) return j.fail_value(__LINE__, "PtlNIInit", rc, PTL_OK), false;
  PtlGetId(j.ni, &j.me);
  PtlGetPhysId(j.ni, &j.my_phys);
  PtlGetUid(j.ni, &j.uid);
  j.rank = j.logical ? int(j.me.rank) : int(j.my_phys.phys.pid);
  // pier's pid is the rank, its nid names the host (both ranks on one host).
  j.peer_phys = j.my_phys;
  j.peer_phys.phys.pid = ptl_pid_t(1 - j.rank);
  if (j.logical)
    j.peer.rank = ptl_rank_t(1 - j.rank);
  else
    j.peer = j.peer_phys;
  ptl_pt_index_t pt = 0;
  if (PtlEQAlloc(j.ni, 64, &j.teq) != PTL_OK || PtlEQAlloc(j.ni, 64, &j.ieq) != PTL_OK ||
      PtlPTAlloc(j.ni, 0, j.teq, rule_pt, &pt) != PTL_OK ||
      PtlPTAlloc(j.ni, 0, PTL_EQ_NONE, sync_pt, &pt) != PTL_OK)
    return j.fail(__LINE__, "queues and portal indexes"), false;
  j.sync_arrivals = j.new_ct();
  j.sync_acks = j.new_ct();
  static unsigned char nothing[8];
  j.sync_md = j.bind_to(nothing, sizeof nothing, PTL_MD_EVENT_CT_ACK, PTL_EQ_NONE, j.sync_acks);
  if (j.matching) {
    ptl_me_t m = j.me_for(nothing, 0, PTL_ME_OP_PUT | PTL_ME_EVENT_CT_COMM, 0, ~ptl_match_bits_t{0},
                          j.sync_arrivals);
    ptl_handle_me_t h;
    rc = PtlMEAppend(j.ni, sync_pt, &m, PTL_PRIORITY_LIST, nullptr, &h);
  } else {
    ptl_le_t l{nothing, 0, j.sync_arrivals, PTL_UID_ANY, PTL_LE_OP_PUT | PTL_LE_EVENT_CT_COMM};
    ptl_handle_le_t h;
    rc = PtlLEAppend(j.ni, sync_pt, &l, PTL_PRIORITY_LIST, nullptr, &h);
  }
  if (rc != PTL_OK) return j.fail_value(__LINE__, "handshake entry", rc, PTL_OK), false;
  return j.errors == 0;
}

}  // namespace
}  // namespace pier::portals::rules

int main(int argc, char** argv) {
  using namespace pier::portals::rules;
  Job j;
  if (argc < 2) {
    std::fprintf(stderr, "usage: portals_rules_job RULE [logical|physical]\n");
    return 2;
  }
  j.rule = argv[1];
  j.logical = !(argc > 2 && std::strcmp(argv[2], "physical") == 0);
  const Rule* rule = find_rule(j.rule);
  if (rule == nullptr) {
    std::fprintf(stderr, "portals_rules_job: no rule %s\n", j.rule);
    return 2;
  }
  if (PtlInit() != PTL_OK) {
    std::fprintf(stderr, "PtlInit failed\n");
    return 1;
  }
  if (bring_up(j, *rule) && j.sync()) {
    rule->run(j);
    // Neither side finalizes while the other may still need it.
    j.sync();
  }
  if (j.ni != PTL_INVALID_HANDLE) PtlNIFini(j.ni);
  PtlFini();
  if (j.errors != 0) {
    std::fprintf(stderr, "rank %d: %s: %d check(s) failed\n", j.rank, j.rule, j.errors);
    return 1;
  }
  std::printf("rank %d: ok\n", j.rank);
  return 0;
}
