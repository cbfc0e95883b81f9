/* pier/port.h: the C API of pier's GM-style port layer (seed 004).
 *
 * The model, in short (docs/port.md has the whole story):
 *   - A process is a node (its node id is its rank in the job). It opens one
 *     or more ports by number; (node id, port number) names a port globally.
 *   - Messages go from a port to a port with a priority, low or high. Order is
 *     kept per (priority, sending port, receiving port); the two priorities
 *     never wait for each other.
 *   - Tokens. A port starts with pier_port_num_send_tokens() send tokens and
 *     pier_port_num_receive_tokens() receive tokens. Every send, put, get,
 *     resume and drop takes a send token, which comes back when its callback
 *     runs. Every provided receive buffer takes a receive token, which comes
 *     back with the receive event that returns the buffer. A call made without
 *     the token it needs fails with PIER_PORT_NO_TOKEN and changes nothing.
 *   - Sizes. A message of `len` bytes has size ceil(log2(len + 8)); it lands
 *     only in a provided buffer of exactly that size and priority.
 *   - Events. pier_port_receive() and the blocking forms return events. Receive
 *     events (PIER_PORT_RECV_EVENT and its HIGH/PEER/FAST variants) describe
 *     an arrived message; every other event must be handed to
 *     pier_port_unknown(), which runs send callbacks and alarm callbacks. A
 *     callback never runs anywhere else.
 *   - Failures. A send that fails (target port closed, node unreachable, no
 *     matching buffer in time, size rejected) disables sending on its
 *     (priority, target node, target port) connection; exactly one
 *     pier_port_resume_sending() or pier_port_drop_sends() per reported
 *     failure enables it again.
 *
 * Handles: a NULL port gives PIER_PORT_INVALID_PARAMETER (calls that return
 * a count give 0, receives give no event, void calls do nothing).
 * Threads: one thread uses a node and its ports at a time.
 * Memory: send buffers must not change until the send's callback; a provided
 * receive buffer belongs to pier until an event returns it. Any memory may be
 * sent or provided; put and get reach only memory the target port registered
 * with pier_port_register_memory(). */
#ifndef PIER_PORT_H
#define PIER_PORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* C names in C style (pier_port_*, PIER_PORT_*), not pier's C++ style. */
/* NOLINTBEGIN(readability-identifier-naming) */

/** Status codes (GM's meanings where GM has the code). */
typedef enum pier_port_status {
  PIER_PORT_SUCCESS = 0,
  PIER_PORT_FAILURE = 1,                       /**< internal or system error */
  PIER_PORT_NO_TOKEN = 2,                      /**< the call needs a token not held */
  PIER_PORT_TRY_AGAIN = 4,                     /**< no room now: process events, retry */
  PIER_PORT_BUSY = 5,                          /**< port number already open */
  PIER_PORT_INVALID_PARAMETER = 8,             /**< bad argument (size, length, priority...) */
  PIER_PORT_OUT_OF_MEMORY = 9,                 /**< setup could not allocate */
  PIER_PORT_PERMISSION_DENIED = 11,            /**< put/get outside registered memory */
  PIER_PORT_NOT_INITIALIZED = 13,              /**< pier_port_init() not called, or closed */
  PIER_PORT_SEND_TIMED_OUT = 15,               /**< no matching receive buffer in time */
  PIER_PORT_SEND_REJECTED = 16,                /**< (size, priority) not accepted */
  PIER_PORT_SEND_TARGET_PORT_CLOSED = 17,      /**< no such port open at the target */
  PIER_PORT_SEND_TARGET_NODE_UNREACHABLE = 18, /**< the target node died or cannot be reached */
  PIER_PORT_SEND_DROPPED = 19, /**< dropped by pier_port_drop_sends(): not an error */
  PIER_PORT_TIMED_OUT = 35,    /**< a blocking call's timeout passed */
  PIER_PORT_NOT_FOUND = 36     /**< no such node, host or object */
} pier_port_status_t;

enum { PIER_PORT_LOW_PRIORITY = 0, PIER_PORT_HIGH_PRIORITY = 1, PIER_PORT_NUM_PRIORITIES = 2 };

/** Event types; the numbers are GM's. */
typedef enum pier_port_event_type {
  PIER_PORT_NO_RECV_EVENT = 0,
  PIER_PORT_ALARM_EVENT = 2,      /**< pass to pier_port_unknown(): runs the alarm callback */
  PIER_PORT_SENT_EVENT = 3,       /**< pass to pier_port_unknown(): runs a send callback */
  PIER_PORT_RECV_EVENT = 11,      /**< low priority message in `buffer` */
  PIER_PORT_HIGH_RECV_EVENT = 12, /**< high priority message in `buffer` */
  PIER_PORT_PEER_RECV_EVENT = 13, /**< as RECV, sent from a port of the same number */
  PIER_PORT_HIGH_PEER_RECV_EVENT = 14,
  PIER_PORT_FAST_RECV_EVENT = 15, /**< small message in `message`, not copied to `buffer` */
  PIER_PORT_FAST_HIGH_RECV_EVENT = 16,
  PIER_PORT_FAST_PEER_RECV_EVENT = 17,
  PIER_PORT_FAST_HIGH_PEER_RECV_EVENT = 18
} pier_port_event_type_t;

/** One event. Valid until the next receive call on the same port. For FAST
 *  events `message` points into pier's event queue (copy it out, for example
 *  with pier_port_memorize_message()); otherwise `message == buffer`. Fields
 *  are in host byte order. */
typedef struct pier_port_event {
  uint8_t type; /**< pier_port_event_type_t */
  uint8_t priority;
  uint8_t size;
  uint8_t tag; /**< the tag the buffer was provided with */
  uint16_t sender_port_id;
  uint16_t receiver_port_id;
  uint32_t sender_node_id;
  uint32_t length;
  void* message;
  void* buffer;
  uint64_t internal_; /**< pier's, for pier_port_unknown() */
} pier_port_event_t;

struct pier_port;
typedef struct pier_port pier_port_t;

/** Called inside pier_port_unknown() when a send, put, get, resume or drop
 *  completes; the send token is back before it runs. */
typedef void (*pier_port_callback_t)(pier_port_t* port, void* context, pier_port_status_t status);

/** An alarm: client memory, initialized once with pier_port_initialize_alarm(). */
typedef struct pier_port_alarm {
  uint64_t opaque_[2];
} pier_port_alarm_t;

/* ---- setup ---- */
/** Joins the job (pier-run, or a singleton) and brings the node up.
 *  Reference-counted: each call needs one pier_port_finalize(). */
pier_port_status_t pier_port_init(void);
void pier_port_finalize(void);
/** Opens port number `port_id` (< pier_port_num_ports()). BUSY when open. */
pier_port_status_t pier_port_open(pier_port_t** port, unsigned port_id);
/** Closes the port: pending sends complete no more; messages sent to it are
 *  answered with TARGET_PORT_CLOSED. */
void pier_port_close(pier_port_t* port);
unsigned pier_port_num_ports(void);
const char* pier_port_strerror(pier_port_status_t status);

/* ---- ids and names ---- */
unsigned pier_port_get_port_id(pier_port_t* port);
pier_port_status_t pier_port_get_node_id(pier_port_t* port, unsigned* node_id);
/** Number of nodes in the job minus one. */
pier_port_status_t pier_port_max_node_id(pier_port_t* port, unsigned* max_node_id);
/** (node id << 16) | port id */
uint32_t pier_port_global_id(pier_port_t* port);
/** The host a node runs on; several nodes may share one. */
pier_port_status_t pier_port_node_id_to_host_name(pier_port_t* port, unsigned node_id, char* name,
                                                  size_t name_len);
/** The lowest node id on `host`. NOT_FOUND when none. */
pier_port_status_t pier_port_host_name_to_node_id(pier_port_t* port, const char* host,
                                                  unsigned* node_id);
pier_port_status_t pier_port_get_host_name(pier_port_t* port, char* name, size_t name_len);

/* ---- tokens and sizes ---- */
unsigned pier_port_num_send_tokens(pier_port_t* port);
unsigned pier_port_num_receive_tokens(pier_port_t* port);
/** Tokens the client holds now. */
unsigned pier_port_send_tokens_held(pier_port_t* port);
unsigned pier_port_receive_tokens_held(pier_port_t* port);
unsigned pier_port_min_size_for_length(uint64_t length);
uint64_t pier_port_max_length_for_size(unsigned size);
/** Messages up to this length arrive as FAST events. */
uint64_t pier_port_fast_max(pier_port_t* port);
/** Bit s of `mask` accepts size s at `priority`; the default accepts all. */
pier_port_status_t pier_port_set_acceptable_sizes(pier_port_t* port, unsigned priority,
                                                  uint64_t mask);

/* ---- memory for put and get ---- */
pier_port_status_t pier_port_register_memory(pier_port_t* port, void* ptr, size_t len);
pier_port_status_t pier_port_deregister_memory(pier_port_t* port, void* ptr, size_t len);

/* ---- sending (each takes a send token) ---- */
pier_port_status_t pier_port_send_with_callback(pier_port_t* port, const void* message,
                                                unsigned size, uint64_t len, unsigned priority,
                                                unsigned target_node_id, unsigned target_port_id,
                                                pier_port_callback_t callback, void* context);
pier_port_status_t pier_port_send_to_peer_with_callback(pier_port_t* port, const void* message,
                                                        unsigned size, uint64_t len,
                                                        unsigned priority, unsigned target_node_id,
                                                        pier_port_callback_t callback,
                                                        void* context);
/** Writes `len` bytes at `remote` (a virtual address the target port registered). */
pier_port_status_t pier_port_put(pier_port_t* port, const void* local, uint64_t remote,
                                 uint64_t len, unsigned priority, unsigned target_node_id,
                                 unsigned target_port_id, pier_port_callback_t callback,
                                 void* context);
/** Reads `len` bytes at `remote` into `local`. */
pier_port_status_t pier_port_get(pier_port_t* port, uint64_t remote, void* local, uint64_t len,
                                 unsigned priority, unsigned target_node_id,
                                 unsigned target_port_id, pier_port_callback_t callback,
                                 void* context);
pier_port_status_t pier_port_resume_sending(pier_port_t* port, unsigned priority,
                                            unsigned target_node_id, unsigned target_port_id,
                                            pier_port_callback_t callback, void* context);
pier_port_status_t pier_port_drop_sends(pier_port_t* port, unsigned priority,
                                        unsigned target_node_id, unsigned target_port_id,
                                        pier_port_callback_t callback, void* context);

/* ---- receiving ---- */
/** Takes a receive token. The buffer holds at least max_length_for_size(size). */
pier_port_status_t pier_port_provide_receive_buffer_with_tag(pier_port_t* port, void* ptr,
                                                             unsigned size, unsigned priority,
                                                             unsigned tag);
/** Never blocks; a NO_RECV event when nothing happened. */
const pier_port_event_t* pier_port_receive(pier_port_t* port);
/** Polls about PIER_PORT_SPIN_US, then sleeps; NO_RECV after `timeout_ms`
 *  (negative: no limit). */
const pier_port_event_t* pier_port_blocking_receive(pier_port_t* port, int timeout_ms);
/** Sleeps at once. */
const pier_port_event_t* pier_port_blocking_receive_no_spin(pier_port_t* port, int timeout_ms);
/** Runs the callback an ALARM or SENT event carries; a receive event given
 *  here goes back to pier (its buffer is provided again). */
void pier_port_unknown(pier_port_t* port, const pier_port_event_t* event);
/** Non-zero when an event is ready. */
int pier_port_receive_pending(pier_port_t* port);
/** The type of the next event (0 when none) and its sender node. */
int pier_port_next_event_peek(pier_port_t* port, uint32_t* sender_node_id);
void pier_port_memorize_message(void* message, void* buffer, uint64_t len);

/* ---- alarms ---- */
void pier_port_initialize_alarm(pier_port_alarm_t* alarm);
/** (Re)arms: one ALARM event after `usecs`, whose unknown() runs callback. */
pier_port_status_t pier_port_set_alarm(pier_port_t* port, pier_port_alarm_t* alarm, uint64_t usecs,
                                       void (*callback)(void* context), void* context);
/** The alarm fires no more (even if its event was queued, not yet handled). */
void pier_port_cancel_alarm(pier_port_t* port, pier_port_alarm_t* alarm);

/* NOLINTEND(readability-identifier-naming) */

#ifdef __cplusplus
}
#endif

#endif /* PIER_PORT_H */
