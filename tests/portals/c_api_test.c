/* Compiled as strict C99 against portals4.h and linked with -lportals:
 * the header is valid C, and a C program runs a put to itself. Exits 0 on
 * success, 1 with a message otherwise. */
#include <portals4.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                        \
  do {                                                                     \
    int rc_ = (call);                                                      \
    if (rc_ != PTL_OK) {                                                   \
      fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, rc_); \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(void) {
  ptl_handle_ni_t ni;
  ptl_handle_eq_t eq;
  ptl_handle_md_t md;
  ptl_handle_me_t me;
  ptl_pt_index_t pt;
  ptl_process_t self;
  ptl_me_t me_desc;
  ptl_md_t md_desc;
  ptl_event_t ev;
  unsigned int which;
  char src[32] = "hello from C99";
  char dst[32];
  int seen_put = 0, seen_ack = 0, i;

  if (PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, NULL, NULL,
                &ni) != PTL_NO_INIT) {
    fprintf(stderr, "PtlNIInit before PtlInit did not return PTL_NO_INIT\n");
    return 1;
  }
  CHECK(PtlInit());
  CHECK(PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, NULL, NULL,
                  &ni));
  CHECK(PtlGetId(ni, &self));
  CHECK(PtlEQAlloc(ni, 64, &eq));
  CHECK(PtlPTAlloc(ni, 0, eq, PTL_PT_ANY, &pt));
  memset(dst, 0, sizeof dst);
  memset(&me_desc, 0, sizeof me_desc);
  me_desc.start = dst;
  me_desc.length = sizeof dst;
  me_desc.ct_handle = PTL_CT_NONE;
  me_desc.uid = PTL_UID_ANY;
  me_desc.options = PTL_ME_OP_PUT | PTL_ME_USE_ONCE;
  me_desc.match_id.phys.nid = PTL_NID_ANY;
  me_desc.match_id.phys.pid = PTL_PID_ANY;
  me_desc.match_bits = 42;
  CHECK(PtlMEAppend(ni, pt, &me_desc, PTL_PRIORITY_LIST, NULL, &me));
  md_desc.start = src;
  md_desc.length = sizeof src;
  md_desc.options = 0;
  md_desc.eq_handle = eq;
  md_desc.ct_handle = PTL_CT_NONE;
  CHECK(PtlMDBind(ni, &md_desc, &md));
  CHECK(PtlPut(md, 0, sizeof src, PTL_ACK_REQ, self, pt, 42, 0, NULL, 7));
  for (i = 0; i < 10 && !(seen_put && seen_ack); ++i) {
    int rc = PtlEQPoll(&eq, 1, 5000, &ev, &which);
    if (rc != PTL_OK) {
      fprintf(stderr, "PtlEQPoll = %d\n", rc);
      return 1;
    }
    if (ev.type == PTL_EVENT_PUT) seen_put = ev.hdr_data == 7 && ev.mlength == sizeof src;
    if (ev.type == PTL_EVENT_ACK) seen_ack = ev.ni_fail_type == PTL_NI_OK;
  }
  if (!seen_put || !seen_ack || strcmp(dst, src) != 0) {
    fprintf(stderr, "put did not arrive: put=%d ack=%d dst='%s'\n", seen_put, seen_ack, dst);
    return 1;
  }
  CHECK(PtlMDRelease(md));
  CHECK(PtlPTFree(ni, pt));
  CHECK(PtlEQFree(eq));
  CHECK(PtlNIFini(ni));
  PtlFini();
  printf("c99 put to self: ok\n");
  return 0;
}
