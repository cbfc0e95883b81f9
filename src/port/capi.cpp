// pier::port: the C entry points of pier/port.h over the C++ API, and the
// one mapping of Status to pier_port_status_t. Nothing here throws into C.
#include <cstring>
#include <mutex>

#include "port/impl.hpp"

namespace pier::port {

pier_port_status_t to_c_status(Status s) noexcept {
  switch (s) {
    case Status::ok:
    case Status::in_progress:
      return PIER_PORT_SUCCESS;
    case Status::no_resource:
      return PIER_PORT_NO_TOKEN;
    case Status::invalid_argument:
    case Status::unsupported:
    case Status::truncated:
      return PIER_PORT_INVALID_PARAMETER;
    case Status::timeout:
      return PIER_PORT_SEND_TIMED_OUT;
    case Status::rejected:
      return PIER_PORT_SEND_REJECTED;
    case Status::closed:
      return PIER_PORT_SEND_TARGET_PORT_CLOSED;
    case Status::broken:
    case Status::malformed:
    case Status::version_mismatch:
      return PIER_PORT_SEND_TARGET_NODE_UNREACHABLE;
    case Status::dropped:
    case Status::canceled:
      return PIER_PORT_SEND_DROPPED;
    case Status::in_use:
      return PIER_PORT_BUSY;
    case Status::not_found:
      return PIER_PORT_NOT_FOUND;
    case Status::permission_denied:
      return PIER_PORT_PERMISSION_DENIED;
    case Status::no_memory:
      return PIER_PORT_OUT_OF_MEMORY;
    case Status::not_initialized:
      return PIER_PORT_NOT_INITIALIZED;
    case Status::system_error:
    case Status::internal:
      return PIER_PORT_FAILURE;
  }
  return PIER_PORT_FAILURE;
}

namespace {

std::mutex init_mutex;
std::unique_ptr<Node> the_node;
int init_count = 0;
int open_ports = 0;  ///< C handles not yet closed (they keep the node)

Port::Impl& impl_of(pier_port_t* p) {
  return reinterpret_cast<Port*>(p)->impl();
}
Port& port_of(pier_port_t* p) {
  return *reinterpret_cast<Port*>(p);
}

/// What a receive on a NULL port returns: no event, as on an idle port.
const pier_port_event_t no_event{};

Priority prio(unsigned p) {
  return static_cast<Priority>(p > 1 ? 2 : p);
}

/// A C priority as the core's byte: anything but 0 or 1 becomes a value the
/// port refuses (a plain cast let 256 pass as low and 257 as high).
std::uint8_t wire_priority(unsigned p) {
  return static_cast<std::uint8_t>(p > 1 ? 0xff : p);
}

pier_port_status_t copy_name(const std::string& name, char* out, size_t len) {
  if (out == nullptr || len == 0) return PIER_PORT_INVALID_PARAMETER;
  if (name.size() >= len) return PIER_PORT_INVALID_PARAMETER;
  std::memcpy(out, name.c_str(), name.size() + 1);
  return PIER_PORT_SUCCESS;
}

}  // namespace
}  // namespace pier::port

using namespace pier::port;  // NOLINT: the C entry points below are thin wrappers
using pier::Status;

extern "C" {

pier_port_status_t pier_port_init(void) {
  std::lock_guard lock(init_mutex);
  if (init_count > 0 || the_node) {
    ++init_count;  // (a node its open ports kept after finalize serves again)
    return PIER_PORT_SUCCESS;
  }
  try {
    auto node = Node::create();
    if (!node) return to_c_status(node.status());
    the_node = std::move(*node);
  } catch (...) {
    return PIER_PORT_OUT_OF_MEMORY;
  }
  init_count = 1;
  return PIER_PORT_SUCCESS;
}

void pier_port_finalize(void) {
  std::lock_guard lock(init_mutex);
  // Ports still open keep the node: their handles stay valid, and the last
  // pier_port_close() lets it go (it was freed under them).
  if (init_count > 0 && --init_count == 0 && open_ports == 0) the_node.reset();
}

pier_port_status_t pier_port_open(pier_port_t** port, unsigned port_id) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  {
    std::lock_guard lock(init_mutex);
    if (!the_node || init_count == 0) return PIER_PORT_NOT_INITIALIZED;
  }
  try {
    auto p = the_node->open(port_id);
    if (!p) return to_c_status(p.status());
    *port = reinterpret_cast<pier_port_t*>(p->release());
    std::lock_guard lock(init_mutex);
    ++open_ports;
  } catch (...) {
    return PIER_PORT_OUT_OF_MEMORY;
  }
  return PIER_PORT_SUCCESS;
}

void pier_port_close(pier_port_t* port) {
  if (port == nullptr) return;
  delete reinterpret_cast<Port*>(port);
  std::lock_guard lock(init_mutex);
  if (open_ports > 0 && --open_ports == 0 && init_count == 0) the_node.reset();
}

unsigned pier_port_num_ports(void) {
  return the_node ? the_node->port_limit() : 0;
}

const char* pier_port_strerror(pier_port_status_t status) {
  switch (status) {
    case PIER_PORT_SUCCESS:
      return "success";
    case PIER_PORT_FAILURE:
      return "internal or system failure";
    case PIER_PORT_NO_TOKEN:
      return "the call needs a token the client does not hold";
    case PIER_PORT_TRY_AGAIN:
      return "no room now; process events and retry";
    case PIER_PORT_BUSY:
      return "port already open";
    case PIER_PORT_INVALID_PARAMETER:
      return "invalid parameter";
    case PIER_PORT_OUT_OF_MEMORY:
      return "out of memory";
    case PIER_PORT_PERMISSION_DENIED:
      return "outside the target's registered memory";
    case PIER_PORT_NOT_INITIALIZED:
      return "not initialized";
    case PIER_PORT_SEND_TIMED_OUT:
      return "send timed out: no matching receive buffer";
    case PIER_PORT_SEND_REJECTED:
      return "send rejected: size not accepted";
    case PIER_PORT_SEND_TARGET_PORT_CLOSED:
      return "send target port closed";
    case PIER_PORT_SEND_TARGET_NODE_UNREACHABLE:
      return "send target node unreachable";
    case PIER_PORT_SEND_DROPPED:
      return "send dropped";
    case PIER_PORT_TIMED_OUT:
      return "timed out";
    case PIER_PORT_NOT_FOUND:
      return "not found";
  }
  return "unknown status";
}

unsigned pier_port_get_port_id(pier_port_t* port) {
  if (port == nullptr) return 0;
  return port_of(port).id();
}

pier_port_status_t pier_port_get_node_id(pier_port_t* port, unsigned* node_id) {
  if (port == nullptr || node_id == nullptr) return PIER_PORT_INVALID_PARAMETER;
  *node_id = port_of(port).node().node_id();
  return PIER_PORT_SUCCESS;
}

pier_port_status_t pier_port_max_node_id(pier_port_t* port, unsigned* max_node_id) {
  if (port == nullptr || max_node_id == nullptr) return PIER_PORT_INVALID_PARAMETER;
  *max_node_id = port_of(port).node().node_count() - 1;
  return PIER_PORT_SUCCESS;
}

uint32_t pier_port_global_id(pier_port_t* port) {
  if (port == nullptr) return 0;
  return port_of(port).global_id();
}

pier_port_status_t pier_port_node_id_to_host_name(pier_port_t* port, unsigned node_id, char* name,
                                                  size_t name_len) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  try {
    auto host = port_of(port).node().host_name(node_id);
    if (!host) return to_c_status(host.status());
    return copy_name(*host, name, name_len);
  } catch (...) {
    return PIER_PORT_OUT_OF_MEMORY;
  }
}

pier_port_status_t pier_port_host_name_to_node_id(pier_port_t* port, const char* host,
                                                  unsigned* node_id) {
  if (port == nullptr || host == nullptr || node_id == nullptr) return PIER_PORT_INVALID_PARAMETER;
  try {
    auto id = port_of(port).node().node_id_of_host(host);
    if (!id) return to_c_status(id.status());
    *node_id = *id;
    return PIER_PORT_SUCCESS;
  } catch (...) {
    return PIER_PORT_OUT_OF_MEMORY;
  }
}

pier_port_status_t pier_port_get_host_name(pier_port_t* port, char* name, size_t name_len) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  Node& node = port_of(port).node();
  return pier_port_node_id_to_host_name(port, node.node_id(), name, name_len);
}

unsigned pier_port_num_send_tokens(pier_port_t* port) {
  if (port == nullptr) return 0;
  return port_of(port).send_tokens();
}
unsigned pier_port_num_receive_tokens(pier_port_t* port) {
  if (port == nullptr) return 0;
  return port_of(port).receive_tokens();
}
unsigned pier_port_send_tokens_held(pier_port_t* port) {
  if (port == nullptr) return 0;
  return port_of(port).send_tokens_held();
}
unsigned pier_port_receive_tokens_held(pier_port_t* port) {
  if (port == nullptr) return 0;
  return port_of(port).receive_tokens_held();
}
unsigned pier_port_min_size_for_length(uint64_t length) {
  return min_size_for_length(length);
}
uint64_t pier_port_max_length_for_size(unsigned size) {
  return max_length_for_size(size);
}
uint64_t pier_port_fast_max(pier_port_t* port) {
  if (port == nullptr) return 0;
  return port_of(port).fast_max();
}

pier_port_status_t pier_port_set_acceptable_sizes(pier_port_t* port, unsigned priority,
                                                  uint64_t mask) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  return to_c_status(port_of(port).set_acceptable_sizes(prio(priority), mask));
}

pier_port_status_t pier_port_register_memory(pier_port_t* port, void* ptr, size_t len) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  return to_c_status(port_of(port).register_memory(ptr, len));
}
pier_port_status_t pier_port_deregister_memory(pier_port_t* port, void* ptr, size_t len) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  return to_c_status(port_of(port).deregister_memory(ptr, len));
}

pier_port_status_t pier_port_send_with_callback(pier_port_t* port, const void* message,
                                                unsigned size, uint64_t len, unsigned priority,
                                                unsigned target_node_id, unsigned target_port_id,
                                                pier_port_callback_t callback, void* context) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  return to_c_status(impl_of(port).start(
      OpKind::send, Completion{nullptr, callback, context}, wire_priority(priority), target_node_id,
      target_port_id, static_cast<std::byte*>(const_cast<void*>(message)), 0, len, size));
}

pier_port_status_t pier_port_send_to_peer_with_callback(pier_port_t* port, const void* message,
                                                        unsigned size, uint64_t len,
                                                        unsigned priority, unsigned target_node_id,
                                                        pier_port_callback_t callback,
                                                        void* context) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  return pier_port_send_with_callback(port, message, size, len, priority, target_node_id,
                                      port_of(port).id(), callback, context);
}

pier_port_status_t pier_port_put(pier_port_t* port, const void* local, uint64_t remote,
                                 uint64_t len, unsigned priority, unsigned target_node_id,
                                 unsigned target_port_id, pier_port_callback_t callback,
                                 void* context) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  return to_c_status(impl_of(port).start(
      OpKind::put, Completion{nullptr, callback, context}, wire_priority(priority), target_node_id,
      target_port_id, static_cast<std::byte*>(const_cast<void*>(local)), remote, len, 0));
}

pier_port_status_t pier_port_get(pier_port_t* port, uint64_t remote, void* local, uint64_t len,
                                 unsigned priority, unsigned target_node_id,
                                 unsigned target_port_id, pier_port_callback_t callback,
                                 void* context) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  return to_c_status(impl_of(port).start(OpKind::get, Completion{nullptr, callback, context},
                                         wire_priority(priority), target_node_id, target_port_id,
                                         static_cast<std::byte*>(local), remote, len, 0));
}

pier_port_status_t pier_port_resume_sending(pier_port_t* port, unsigned priority,
                                            unsigned target_node_id, unsigned target_port_id,
                                            pier_port_callback_t callback, void* context) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  return to_c_status(impl_of(port).resume_or_drop(false, Completion{nullptr, callback, context},
                                                  wire_priority(priority), target_node_id,
                                                  target_port_id));
}

pier_port_status_t pier_port_drop_sends(pier_port_t* port, unsigned priority,
                                        unsigned target_node_id, unsigned target_port_id,
                                        pier_port_callback_t callback, void* context) {
  if (port == nullptr) return PIER_PORT_INVALID_PARAMETER;
  return to_c_status(impl_of(port).resume_or_drop(true, Completion{nullptr, callback, context},
                                                  wire_priority(priority), target_node_id,
                                                  target_port_id));
}

pier_port_status_t pier_port_provide_receive_buffer_with_tag(pier_port_t* port, void* ptr,
                                                             unsigned size, unsigned priority,
                                                             unsigned tag) {
  if (port == nullptr || tag > 255) return PIER_PORT_INVALID_PARAMETER;
  return to_c_status(port_of(port).provide_receive_buffer(ptr, size, prio(priority),
                                                          static_cast<std::uint8_t>(tag)));
}

const pier_port_event_t* pier_port_receive(pier_port_t* port) {
  if (port == nullptr) return &no_event;
  return &port_of(port).receive();
}
const pier_port_event_t* pier_port_blocking_receive(pier_port_t* port, int timeout_ms) {
  if (port == nullptr) return &no_event;
  return &port_of(port).blocking_receive(timeout_ms);
}
const pier_port_event_t* pier_port_blocking_receive_no_spin(pier_port_t* port, int timeout_ms) {
  if (port == nullptr) return &no_event;
  return &port_of(port).blocking_receive_no_spin(timeout_ms);
}
void pier_port_unknown(pier_port_t* port, const pier_port_event_t* event) {
  if (port != nullptr && event != nullptr) port_of(port).unknown(*event);
}
int pier_port_receive_pending(pier_port_t* port) {
  if (port == nullptr) return 0;
  return port_of(port).receive_pending();
}
int pier_port_next_event_peek(pier_port_t* port, uint32_t* sender_node_id) {
  if (port == nullptr) return PIER_PORT_NO_RECV_EVENT;
  return port_of(port).next_event_peek(sender_node_id);
}
void pier_port_memorize_message(void* message, void* buffer, uint64_t len) {
  if (message != buffer && len > 0) std::memmove(buffer, message, len);
}

void pier_port_initialize_alarm(pier_port_alarm_t* alarm) {
  if (alarm) *alarm = pier_port_alarm_t{};
}
pier_port_status_t pier_port_set_alarm(pier_port_t* port, pier_port_alarm_t* alarm, uint64_t usecs,
                                       void (*callback)(void* context), void* context) {
  if (port == nullptr || alarm == nullptr) return PIER_PORT_INVALID_PARAMETER;
  return to_c_status(port_of(port).set_alarm(*alarm, usecs, callback, context));
}
void pier_port_cancel_alarm(pier_port_t* port, pier_port_alarm_t* alarm) {
  if (port != nullptr && alarm != nullptr) port_of(port).cancel_alarm(*alarm);
}

}  // extern "C"
