/* portals4.h: the Portals 4 one-sided API (4.3 revision, current numbering),
 * as implemented by pier (libportals.so.4). Source compatible with programs
 * written for the Portals 4 reference header. C99 and C++.
 *
 * Contract common to every function except PtlInit, PtlFini, PtlAbort and
 * PtlHandleIsEqual: PTL_NO_INIT before PtlInit (or after the final PtlFini),
 * PTL_ARG_INVALID for a handle that is not a live handle of the right kind
 * (PTL_INVALID_HANDLE, freed, forged, or of another kind). Completion of
 * data movement is reported only through events and counting events.
 * Thread safety: every function may be called from any thread; blocking
 * calls (PtlEQWait, PtlEQPoll, PtlCTWait, PtlCTPoll) return PTL_ABORTED
 * after PtlAbort. docs/portals.md lists where pier differs from the
 * reference implementation.
 */
#ifndef PORTALS4_H
#define PORTALS4_H

#include <stdint.h>

#if defined(__cplusplus) || defined(c_plusplus)
extern "C" {
#endif

/* The names are the specification's, in C style, not pier's C++ style. */
/* NOLINTBEGIN(readability-identifier-naming) */

/* ---- scalar types ---------------------------------------------------- */
typedef uint64_t ptl_size_t;
typedef uint32_t ptl_pt_index_t;
typedef uint64_t ptl_match_bits_t;
typedef uint64_t ptl_hdr_data_t;
typedef unsigned int ptl_time_t;
typedef unsigned int ptl_interface_t;
typedef uint32_t ptl_nid_t;
typedef uint32_t ptl_pid_t;
typedef uint32_t ptl_rank_t;
typedef uint32_t ptl_uid_t;
typedef int ptl_sr_value_t;
typedef unsigned char ptl_ni_fail_t;
typedef unsigned char ptl_list_t;
typedef unsigned char ptl_search_op_t;
typedef unsigned char ptl_ack_req_t;
typedef unsigned char ptl_op_t;
typedef unsigned char ptl_datatype_t;
typedef unsigned char ptl_event_kind_t;

/* Legacy, used by no function. */
typedef enum { PTL_CT_OPERATION = 0, PTL_CT_BYTE = 1 } ptl_ct_type_t;

/* ---- handles: all one type, opaque ----------------------------------- */
typedef uint32_t ptl_handle_any_t;
typedef ptl_handle_any_t ptl_handle_ni_t;
typedef ptl_handle_any_t ptl_handle_eq_t;
typedef ptl_handle_any_t ptl_handle_ct_t;
typedef ptl_handle_any_t ptl_handle_md_t;
typedef ptl_handle_any_t ptl_handle_le_t;
typedef ptl_handle_any_t ptl_handle_me_t;

/* ---- return codes ---------------------------------------------------- */
enum ptl_retvals {
  PTL_OK = 0,              /* success */
  PTL_ARG_INVALID = 1,     /* bad argument or handle */
  PTL_CT_NONE_REACHED = 2, /* PtlCTPoll timed out */
  PTL_EQ_DROPPED = 3,      /* event returned; earlier events were lost */
  PTL_EQ_EMPTY = 4,        /* no event (Get) or timeout (Poll) */
  PTL_FAIL = 5,            /* unspecified failure */
  PTL_IGNORED = 6,         /* PtlSetMap: a map is already set */
  PTL_IN_USE = 7,          /* resource busy */
  PTL_LIST_TOO_LONG = 8,   /* list length limit exceeded */
  PTL_NO_INIT = 9,         /* PtlInit not called */
  PTL_NO_SPACE = 10,       /* out of memory or over a resource limit */
  PTL_PID_IN_USE = 11,     /* requested pid taken */
  PTL_PT_FULL = 12,        /* no free portal index */
  PTL_PT_EQ_NEEDED = 13,   /* flow control without an EQ */
  PTL_PT_IN_USE = 14,      /* portal index busy */
  PTL_ABORTED = 15         /* wait or poll ended by PtlAbort */
};
/* Kept for compatibility: equals PTL_ABORTED, as in the reference. */
#define PTL_STATUS_LAST (PTL_PT_IN_USE + 1)

/* ---- special values -------------------------------------------------- */
#define PTL_EQ_NONE ((ptl_handle_eq_t)0x3fffffff)
#define PTL_CT_NONE ((ptl_handle_ct_t)0x5fffffff)
#define PTL_INVALID_HANDLE ((ptl_handle_any_t)0xffffffff)
#define PTL_IFACE_DEFAULT ((ptl_interface_t)0xffffffff)
#define PTL_PID_ANY ((ptl_pid_t)0xffff)
#define PTL_NID_ANY ((ptl_nid_t)0xffff)
#define PTL_UID_ANY ((ptl_uid_t)0xffffffff)
#define PTL_RANK_ANY ((ptl_rank_t)0xffffffff)
#define PTL_PT_ANY ((ptl_pt_index_t)0xffffffff)
#define PTL_TIME_FOREVER ((ptl_time_t)0xffffffff)
#define PTL_SIZE_MAX ((ptl_size_t)0xffffffffffffffffULL)
#define PTL_PID_MAX ((ptl_pid_t)1024)

/* ---- option bits ----------------------------------------------------- */
#define PTL_IOVEC (1)

enum ni_types { NI_T_MATCHING = 0, NI_T_NMATCHING, NI_T_LOGICAL, NI_T_PHYSICAL, NI_T_OPTIONS_MASK };
#define PTL_NI_MATCHING (1 << NI_T_MATCHING)
#define PTL_NI_NO_MATCHING (1 << NI_T_NMATCHING)
#define PTL_NI_LOGICAL (1 << NI_T_LOGICAL)
#define PTL_NI_PHYSICAL (1 << NI_T_PHYSICAL)
#define PTL_NI_INIT_OPTIONS_MASK ((1 << NI_T_OPTIONS_MASK) - 1)

enum ni_features {
  NI_BIND_INACCESSIBLE = 0,
  NI_DATA_ORDERING,
  NI_COHERENT_ATOMICS,
  NI_OPTIONS_MASK
};
#define PTL_TARGET_BIND_INACCESSIBLE (1 << NI_BIND_INACCESSIBLE)
#define PTL_TOTAL_DATA_ORDERING (1 << NI_DATA_ORDERING)
#define PTL_COHERENT_ATOMICS (1 << NI_COHERENT_ATOMICS)

enum pt_options {
  ONLY_USE_ONCE = 0,
  FLOWCTRL,
  ONLY_TRUNCATE,
  MATCH_UNORDERED,
  PT_ALLOC_DISABLED,
  PT_OPTIONS_MASK
};
#define PTL_PT_ONLY_USE_ONCE (1 << ONLY_USE_ONCE)
#define PTL_PT_FLOWCTRL (1 << FLOWCTRL)
#define PTL_PT_ONLY_TRUNCATE (1 << ONLY_TRUNCATE)
#define PTL_PT_MATCH_UNORDERED (1 << MATCH_UNORDERED)
#define PTL_PT_ALLOC_DISABLED (1 << PT_ALLOC_DISABLED)
#define PTL_PT_ALLOC_OPTIONS_MASK ((1 << PT_OPTIONS_MASK) - 1)

enum md_options {
  MD_EVNT_CT_SEND = 1,
  MD_EVNT_CT_REPLY,
  MD_EVNT_CT_ACK,
  MD_UNORDERED,
  MD_EVNT_SUCCESS_DISABLE,
  MD_VOLATILE,
  MD_EVNT_SEND_DISABLE,
  MD_UNRELIABLE,
  MD_OPTIONS_MASK
};

enum mele_options {
  MELE_IOVEC = 0,
  MELE_OP_PUT,
  MELE_OP_GET,
  MELE_USE_ONCE,
  MELE_UNEXPECTED_HDR_DISABLE,
  MELE_IS_ACCESSIBLE,
  MELE_EVNT_LINK_DISABLE,
  MELE_EVNT_COMM_DISABLE,
  MELE_EVNT_FLOWCTRL_DISABLE,
  MELE_EVNT_SUCCESS_DISABLE,
  MELE_EVNT_OVER_DISABLE,
  MELE_EVNT_UNLINK_DISABLE,
  MELE_EVNT_CT_COMM,
  MELE_EVNT_CT_OVERFLOW,
  MELE_EVNT_CT_BYTES,
  LE_OPTIONS_MASK
};

enum me_options {
  ME_MANAGE_LOCAL = LE_OPTIONS_MASK,
  ME_NO_TRUNCATE,
  ME_MAY_ALIGN,
  ME_LOCAL_INC_UH_RLENGTH,
  ME_OPTIONS_MASK
};

#define PTL_MD_EVENT_CT_SEND (1 << MD_EVNT_CT_SEND)
#define PTL_MD_EVENT_CT_REPLY (1 << MD_EVNT_CT_REPLY)
#define PTL_MD_EVENT_CT_ACK (1 << MD_EVNT_CT_ACK)
#define PTL_MD_UNORDERED (1 << MD_UNORDERED)
#define PTL_MD_EVENT_SUCCESS_DISABLE (1 << MD_EVNT_SUCCESS_DISABLE)
#define PTL_MD_VOLATILE (1 << MD_VOLATILE)
#define PTL_MD_EVENT_SEND_DISABLE (1 << MD_EVNT_SEND_DISABLE)
#define PTL_MD_UNRELIABLE (1 << MD_UNRELIABLE)
#define PTL_MD_EVENT_CT_BYTES (1 << MELE_EVNT_CT_BYTES)
#define PTL_MD_OPTIONS_MASK (((1 << MD_OPTIONS_MASK) - 1) | PTL_MD_EVENT_CT_BYTES)

#define PTL_ME_OP_PUT (1 << MELE_OP_PUT)
#define PTL_ME_OP_GET (1 << MELE_OP_GET)
#define PTL_ME_USE_ONCE (1 << MELE_USE_ONCE)
#define PTL_ME_UNEXPECTED_HDR_DISABLE (1 << MELE_UNEXPECTED_HDR_DISABLE)
#define PTL_ME_IS_ACCESSIBLE (1 << MELE_IS_ACCESSIBLE)
#define PTL_ME_EVENT_LINK_DISABLE (1 << MELE_EVNT_LINK_DISABLE)
#define PTL_ME_EVENT_COMM_DISABLE (1 << MELE_EVNT_COMM_DISABLE)
#define PTL_ME_EVENT_FLOWCTRL_DISABLE (1 << MELE_EVNT_FLOWCTRL_DISABLE)
#define PTL_ME_EVENT_SUCCESS_DISABLE (1 << MELE_EVNT_SUCCESS_DISABLE)
#define PTL_ME_EVENT_OVER_DISABLE (1 << MELE_EVNT_OVER_DISABLE)
#define PTL_ME_EVENT_UNLINK_DISABLE (1 << MELE_EVNT_UNLINK_DISABLE)
#define PTL_ME_EVENT_CT_COMM (1 << MELE_EVNT_CT_COMM)
#define PTL_ME_EVENT_CT_OVERFLOW (1 << MELE_EVNT_CT_OVERFLOW)
#define PTL_ME_EVENT_CT_BYTES (1 << MELE_EVNT_CT_BYTES)
#define PTL_ME_MANAGE_LOCAL (1 << ME_MANAGE_LOCAL)
#define PTL_ME_NO_TRUNCATE (1 << ME_NO_TRUNCATE)
#define PTL_ME_MAY_ALIGN (1 << ME_MAY_ALIGN)
#define PTL_ME_LOCAL_INC_UH_RLENGTH (1 << ME_LOCAL_INC_UH_RLENGTH)
#define PTL_ME_APPEND_OPTIONS_MASK ((1 << ME_OPTIONS_MASK) - 1)

#define PTL_LE_OP_PUT PTL_ME_OP_PUT
#define PTL_LE_OP_GET PTL_ME_OP_GET
#define PTL_LE_USE_ONCE PTL_ME_USE_ONCE
#define PTL_LE_UNEXPECTED_HDR_DISABLE PTL_ME_UNEXPECTED_HDR_DISABLE
#define PTL_LE_IS_ACCESSIBLE PTL_ME_IS_ACCESSIBLE
#define PTL_LE_EVENT_LINK_DISABLE PTL_ME_EVENT_LINK_DISABLE
#define PTL_LE_EVENT_COMM_DISABLE PTL_ME_EVENT_COMM_DISABLE
#define PTL_LE_EVENT_FLOWCTRL_DISABLE PTL_ME_EVENT_FLOWCTRL_DISABLE
#define PTL_LE_EVENT_SUCCESS_DISABLE PTL_ME_EVENT_SUCCESS_DISABLE
#define PTL_LE_EVENT_OVER_DISABLE PTL_ME_EVENT_OVER_DISABLE
#define PTL_LE_EVENT_UNLINK_DISABLE PTL_ME_EVENT_UNLINK_DISABLE
#define PTL_LE_EVENT_CT_COMM PTL_ME_EVENT_CT_COMM
#define PTL_LE_EVENT_CT_OVERFLOW PTL_ME_EVENT_CT_OVERFLOW
#define PTL_LE_EVENT_CT_BYTES PTL_ME_EVENT_CT_BYTES
#define PTL_LE_APPEND_OPTIONS_MASK ((1 << LE_OPTIONS_MASK) - 1)

/* Compatibility names (removed in 4.3): pier defines them as 0, so code
 * that ORs them in still compiles and the option has no effect (4.3 has no
 * target-side way to refuse an acknowledgment). PTL_INTERRUPTED is an
 * alias of PTL_ABORTED, the 4.3 code for an interrupted wait. */
#define PTL_ME_ACK_DISABLE 0
#define PTL_LE_ACK_DISABLE 0
#define PTL_INTERRUPTED PTL_ABORTED

/* ---- lists, searches, acks ------------------------------------------- */
#define PTL_PRIORITY_LIST 0
#define PTL_OVERFLOW_LIST 1
#define PTL_SEARCH_ONLY 0
#define PTL_SEARCH_DELETE 1
#define PTL_NO_ACK_REQ 0
#define PTL_ACK_REQ 1
#define PTL_CT_ACK_REQ 2
#define PTL_OC_ACK_REQ 3

/* ---- failure codes (ptl_ni_fail_t) ------------------------------------ */
#define PTL_NI_OK 0
#define PTL_NI_UNDELIVERABLE 1
#define PTL_NI_DROPPED 2
#define PTL_NI_PT_DISABLED 3
#define PTL_NI_PERM_VIOLATION 4
#define PTL_NI_OP_VIOLATION 5
#define PTL_NI_NO_MATCH 6
#define PTL_NI_SEGV 7

/* ---- status registers ------------------------------------------------- */
typedef enum {
  PTL_SR_DROP_COUNT = 0,
  PTL_SR_PERMISSION_VIOLATIONS = 1,
  PTL_SR_OPERATION_VIOLATIONS = 2
} ptl_sr_index_t;
#define PTL_SR_LAST 3

/* ---- event kinds ------------------------------------------------------ */
#define PTL_EVENT_GET 0
#define PTL_EVENT_GET_OVERFLOW 1
#define PTL_EVENT_PUT 2
#define PTL_EVENT_PUT_OVERFLOW 3
#define PTL_EVENT_ATOMIC 4
#define PTL_EVENT_ATOMIC_OVERFLOW 5
#define PTL_EVENT_FETCH_ATOMIC 6
#define PTL_EVENT_FETCH_ATOMIC_OVERFLOW 7
#define PTL_EVENT_REPLY 8
#define PTL_EVENT_SEND 9
#define PTL_EVENT_ACK 10
#define PTL_EVENT_PT_DISABLED 11
#define PTL_EVENT_LINK 12
#define PTL_EVENT_AUTO_UNLINK 13
#define PTL_EVENT_AUTO_FREE 14
#define PTL_EVENT_SEARCH 15

/* ---- atomic operations and datatypes ---------------------------------- */
#define PTL_MIN 0
#define PTL_MAX 1
#define PTL_SUM 2
#define PTL_PROD 3
#define PTL_LOR 4
#define PTL_LAND 5
#define PTL_BOR 6
#define PTL_BAND 7
#define PTL_LXOR 8
#define PTL_BXOR 9
#define PTL_SWAP 10
#define PTL_CSWAP 11
#define PTL_CSWAP_NE 12
#define PTL_CSWAP_LE 13
#define PTL_CSWAP_LT 14
#define PTL_CSWAP_GE 15
#define PTL_CSWAP_GT 16
#define PTL_MSWAP 17
#define PTL_OP_LAST 18

#define PTL_INT8_T 0
#define PTL_UINT8_T 1
#define PTL_INT16_T 2
#define PTL_UINT16_T 3
#define PTL_INT32_T 4
#define PTL_UINT32_T 5
#define PTL_FLOAT 6
#define PTL_INT64_T 7
#define PTL_UINT64_T 8
#define PTL_DOUBLE 9
#define PTL_FLOAT_COMPLEX 10
#define PTL_DOUBLE_COMPLEX 11
#define PTL_LONG_DOUBLE 12
#define PTL_LONG_DOUBLE_COMPLEX 13
#define PTL_DATATYPE_LAST 14

/* ---- structures (field order is normative) ----------------------------- */
typedef union {
  ptl_rank_t rank;
  struct {
    ptl_nid_t nid;
    ptl_pid_t pid;
  } phys;
} ptl_process_t;

typedef struct {
  void* iov_base;
  ptl_size_t iov_len;
} ptl_iovec_t;

typedef struct {
  void* start;       /* region, or ptl_iovec_t[] with PTL_IOVEC */
  ptl_size_t length; /* bytes, or iovec count with PTL_IOVEC */
  unsigned int options;
  ptl_handle_eq_t eq_handle; /* initiator events, or PTL_EQ_NONE */
  ptl_handle_ct_t ct_handle; /* initiator counting, or PTL_CT_NONE */
} ptl_md_t;

typedef struct {
  void* start;
  ptl_size_t length;
  ptl_handle_ct_t ct_handle;
  ptl_uid_t uid;
  unsigned int options;
} ptl_le_t;

typedef struct {
  void* start;
  ptl_size_t length;
  ptl_handle_ct_t ct_handle;
  ptl_uid_t uid;
  unsigned int options;
  ptl_process_t match_id;
  ptl_match_bits_t match_bits;
  ptl_match_bits_t ignore_bits;
  ptl_size_t min_free;
} ptl_me_t;

typedef struct {
  ptl_size_t success;
  ptl_size_t failure;
} ptl_ct_event_t;

typedef struct {
  int max_entries;
  int max_unexpected_headers;
  int max_mds;
  int max_cts;
  int max_eqs;
  int max_pt_index;
  int max_iovecs;
  int max_list_size;
  int max_triggered_ops;
  ptl_size_t max_msg_size;
  ptl_size_t max_atomic_size;
  ptl_size_t max_fetch_atomic_size;
  ptl_size_t max_waw_ordered_size;
  ptl_size_t max_war_ordered_size;
  ptl_size_t max_volatile_size;
  unsigned int features;
} ptl_ni_limits_t;

typedef struct {
  void* start;
  void* user_ptr;
  ptl_hdr_data_t hdr_data;
  ptl_match_bits_t match_bits;
  ptl_size_t rlength;
  ptl_size_t mlength;
  ptl_size_t remote_offset;
  ptl_process_t initiator;
  ptl_uid_t uid;
  ptl_pt_index_t pt_index;
  ptl_event_kind_t type;
  ptl_list_t ptl_list;
  ptl_ni_fail_t ni_fail_type;
  ptl_op_t atomic_operation;
  ptl_datatype_t atomic_type;
} ptl_event_t;

/* ---- functions --------------------------------------------------------- */
/* Initialisation: reference counted. PtlInit after the final PtlFini
 * initialises again in a process started alone, and returns PTL_FAIL under
 * pier-run (the launcher admits each rank once). PtlFini lets answers
 * already queued leave (for up to 2 s) before it tears down. PtlAbort makes
 * every blocked wait/poll return PTL_ABORTED while a thread is inside one. */
void PtlAbort(void);
int PtlInit(void);
void PtlFini(void);

int PtlNIInit(ptl_interface_t iface, unsigned int options, ptl_pid_t pid,
              const ptl_ni_limits_t* desired, ptl_ni_limits_t* actual, ptl_handle_ni_t* ni_handle);
int PtlNIFini(ptl_handle_ni_t ni_handle);
int PtlNIStatus(ptl_handle_ni_t ni_handle, ptl_sr_index_t status_register, ptl_sr_value_t* status);
int PtlNIHandle(ptl_handle_any_t handle, ptl_handle_ni_t* ni_handle);

int PtlSetMap(ptl_handle_ni_t ni_handle, ptl_size_t map_size, const ptl_process_t* mapping);
int PtlGetMap(ptl_handle_ni_t ni_handle, ptl_size_t map_size, ptl_process_t* mapping,
              ptl_size_t* actual_map_size);

int PtlPTAlloc(ptl_handle_ni_t ni_handle, unsigned int options, ptl_handle_eq_t eq_handle,
               ptl_pt_index_t pt_index_req, ptl_pt_index_t* pt_index);
int PtlPTFree(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index);
int PtlPTDisable(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index);
int PtlPTEnable(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index);

int PtlGetUid(ptl_handle_ni_t ni_handle, ptl_uid_t* uid);
int PtlGetId(ptl_handle_ni_t ni_handle, ptl_process_t* id);
int PtlGetPhysId(ptl_handle_ni_t ni_handle, ptl_process_t* id);

int PtlMDBind(ptl_handle_ni_t ni_handle, const ptl_md_t* md, ptl_handle_md_t* md_handle);
int PtlMDRelease(ptl_handle_md_t md_handle);

int PtlLEAppend(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index, const ptl_le_t* le,
                ptl_list_t ptl_list, void* user_ptr, ptl_handle_le_t* le_handle);
int PtlLEUnlink(ptl_handle_le_t le_handle);
int PtlLESearch(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index, const ptl_le_t* le,
                ptl_search_op_t ptl_search_op, void* user_ptr);
int PtlMEAppend(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index, const ptl_me_t* me,
                ptl_list_t ptl_list, void* user_ptr, ptl_handle_me_t* me_handle);
int PtlMEUnlink(ptl_handle_me_t me_handle);
int PtlMESearch(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index, const ptl_me_t* me,
                ptl_search_op_t ptl_search_op, void* user_ptr);

int PtlCTAlloc(ptl_handle_ni_t ni_handle, ptl_handle_ct_t* ct_handle);
int PtlCTFree(ptl_handle_ct_t ct_handle);
int PtlCTCancelTriggered(ptl_handle_ct_t ct_handle);
int PtlCTGet(ptl_handle_ct_t ct_handle, ptl_ct_event_t* event);
int PtlCTWait(ptl_handle_ct_t ct_handle, ptl_size_t test, ptl_ct_event_t* event);
int PtlCTPoll(const ptl_handle_ct_t* ct_handles, const ptl_size_t* tests, unsigned int size,
              ptl_time_t timeout, ptl_ct_event_t* event, unsigned int* which);
int PtlCTSet(ptl_handle_ct_t ct_handle, ptl_ct_event_t new_ct);
int PtlCTInc(ptl_handle_ct_t ct_handle, ptl_ct_event_t increment);

int PtlPut(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
           ptl_ack_req_t ack_req, ptl_process_t target_id, ptl_pt_index_t pt_index,
           ptl_match_bits_t match_bits, ptl_size_t remote_offset, void* user_ptr,
           ptl_hdr_data_t hdr_data);
int PtlGet(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
           ptl_process_t target_id, ptl_pt_index_t pt_index, ptl_match_bits_t match_bits,
           ptl_size_t remote_offset, void* user_ptr);
int PtlAtomic(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
              ptl_ack_req_t ack_req, ptl_process_t target_id, ptl_pt_index_t pt_index,
              ptl_match_bits_t match_bits, ptl_size_t remote_offset, void* user_ptr,
              ptl_hdr_data_t hdr_data, ptl_op_t operation, ptl_datatype_t datatype);
int PtlFetchAtomic(ptl_handle_md_t get_md_handle, ptl_size_t local_get_offset,
                   ptl_handle_md_t put_md_handle, ptl_size_t local_put_offset, ptl_size_t length,
                   ptl_process_t target_id, ptl_pt_index_t pt_index, ptl_match_bits_t match_bits,
                   ptl_size_t remote_offset, void* user_ptr, ptl_hdr_data_t hdr_data,
                   ptl_op_t operation, ptl_datatype_t datatype);
int PtlSwap(ptl_handle_md_t get_md_handle, ptl_size_t local_get_offset,
            ptl_handle_md_t put_md_handle, ptl_size_t local_put_offset, ptl_size_t length,
            ptl_process_t target_id, ptl_pt_index_t pt_index, ptl_match_bits_t match_bits,
            ptl_size_t remote_offset, void* user_ptr, ptl_hdr_data_t hdr_data, const void* operand,
            ptl_op_t operation, ptl_datatype_t datatype);
int PtlAtomicSync(void);

int PtlEQAlloc(ptl_handle_ni_t ni_handle, ptl_size_t count, ptl_handle_eq_t* eq_handle);
int PtlEQFree(ptl_handle_eq_t eq_handle);
int PtlEQGet(ptl_handle_eq_t eq_handle, ptl_event_t* event);
int PtlEQWait(ptl_handle_eq_t eq_handle, ptl_event_t* event);
int PtlEQPoll(const ptl_handle_eq_t* eq_handles, unsigned int size, ptl_time_t timeout,
              ptl_event_t* event, unsigned int* which);

int PtlTriggeredPut(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
                    ptl_ack_req_t ack_req, ptl_process_t target_id, ptl_pt_index_t pt_index,
                    ptl_match_bits_t match_bits, ptl_size_t remote_offset, void* user_ptr,
                    ptl_hdr_data_t hdr_data, ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
int PtlTriggeredGet(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
                    ptl_process_t target_id, ptl_pt_index_t pt_index, ptl_match_bits_t match_bits,
                    ptl_size_t remote_offset, void* user_ptr, ptl_handle_ct_t trig_ct_handle,
                    ptl_size_t threshold);
int PtlTriggeredAtomic(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
                       ptl_ack_req_t ack_req, ptl_process_t target_id, ptl_pt_index_t pt_index,
                       ptl_match_bits_t match_bits, ptl_size_t remote_offset, void* user_ptr,
                       ptl_hdr_data_t hdr_data, ptl_op_t operation, ptl_datatype_t datatype,
                       ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
int PtlTriggeredFetchAtomic(ptl_handle_md_t get_md_handle, ptl_size_t local_get_offset,
                            ptl_handle_md_t put_md_handle, ptl_size_t local_put_offset,
                            ptl_size_t length, ptl_process_t target_id, ptl_pt_index_t pt_index,
                            ptl_match_bits_t match_bits, ptl_size_t remote_offset, void* user_ptr,
                            ptl_hdr_data_t hdr_data, ptl_op_t operation, ptl_datatype_t datatype,
                            ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
int PtlTriggeredSwap(ptl_handle_md_t get_md_handle, ptl_size_t local_get_offset,
                     ptl_handle_md_t put_md_handle, ptl_size_t local_put_offset, ptl_size_t length,
                     ptl_process_t target_id, ptl_pt_index_t pt_index, ptl_match_bits_t match_bits,
                     ptl_size_t remote_offset, void* user_ptr, ptl_hdr_data_t hdr_data,
                     const void* operand, ptl_op_t operation, ptl_datatype_t datatype,
                     ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
int PtlTriggeredCTInc(ptl_handle_ct_t ct_handle, ptl_ct_event_t increment,
                      ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
int PtlTriggeredCTSet(ptl_handle_ct_t ct_handle, ptl_ct_event_t new_ct,
                      ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
/* Non-standard (reference extension): the ptl_me_t and me_handle_p are kept
 * and read when the trigger fires, so they must stay valid until then. */
int PtlTriggeredMEAppend(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index, ptl_me_t* me_init,
                         ptl_list_t ptl_list, void* user_ptr, ptl_handle_me_t* me_handle_p,
                         ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
int PtlTriggeredMEUnlink(ptl_handle_me_t me_handle, ptl_handle_ct_t trig_ct_handle,
                         ptl_size_t threshold);

int PtlStartBundle(ptl_handle_ni_t ni_handle);
int PtlEndBundle(ptl_handle_ni_t ni_handle);
/* Non-zero when both handles name the same object, zero otherwise. */
int PtlHandleIsEqual(ptl_handle_any_t handle1, ptl_handle_any_t handle2);

/* NOLINTEND(readability-identifier-naming) */

#if defined(__cplusplus) || defined(c_plusplus)
}
#endif

#endif /* PORTALS4_H */
