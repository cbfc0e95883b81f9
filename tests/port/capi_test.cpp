// The C entry points of pier/port.h in one process: argument checks that a
// cast used to defeat, NULL port handles, and handles that outlive
// pier_port_finalize().
#include <gtest/gtest.h>
#include <pier/port.h>

#include <cstdint>

namespace {

TEST(PortC, APriorityBeyondHighIsInvalid) {
  ASSERT_EQ(pier_port_init(), PIER_PORT_SUCCESS);
  pier_port_t* p = nullptr;
  ASSERT_EQ(pier_port_open(&p, 0), PIER_PORT_SUCCESS);
  std::uint64_t msg = 7;
  // 256 and 257 were cast to 8 bits: sent low and high.
  for (unsigned bad : {2u, 256u, 257u})
    EXPECT_EQ(pier_port_send_with_callback(p, &msg, 4, sizeof msg, bad, 0, 0, nullptr, nullptr),
              PIER_PORT_INVALID_PARAMETER)
        << "priority " << bad;
  EXPECT_EQ(pier_port_put(p, &msg, 0, sizeof msg, 256, 0, 0, nullptr, nullptr),
            PIER_PORT_INVALID_PARAMETER);
  EXPECT_EQ(pier_port_resume_sending(p, 257, 0, 0, nullptr, nullptr), PIER_PORT_INVALID_PARAMETER);
  pier_port_close(p);
  pier_port_finalize();
}

/// Finalize with a port still open freed the node under the port's handle:
/// closing it then was a use-after-free (ASan). The node now lives until the
/// last port closes; no new port opens meanwhile.
TEST(PortC, APortStillOpenAtFinalizeClosesSafely) {
  ASSERT_EQ(pier_port_init(), PIER_PORT_SUCCESS);
  pier_port_t* p = nullptr;
  ASSERT_EQ(pier_port_open(&p, 3), PIER_PORT_SUCCESS);
  pier_port_finalize();
  pier_port_t* q = nullptr;
  EXPECT_EQ(pier_port_open(&q, 4), PIER_PORT_NOT_INITIALIZED);
  unsigned node = 99;
  EXPECT_EQ(pier_port_get_node_id(p, &node), PIER_PORT_SUCCESS);  // still a live handle
  pier_port_close(p);
  EXPECT_EQ(pier_port_num_ports(), 0u);
  // And a fresh start works.
  ASSERT_EQ(pier_port_init(), PIER_PORT_SUCCESS);
  ASSERT_EQ(pier_port_open(&q, 3), PIER_PORT_SUCCESS);
  pier_port_close(q);
  pier_port_finalize();
}

/// A NULL port (an open that failed, say) is an invalid parameter, never a
/// crash: calls that return a status say so, the others return 0 or no event.
TEST(PortC, ANullPortIsAnInvalidParameter) {
  std::uint64_t msg = 7;
  unsigned node = 9;
  char name[64];
  pier_port_alarm_t alarm;
  pier_port_initialize_alarm(&alarm);
  constexpr auto invalid = PIER_PORT_INVALID_PARAMETER;
  EXPECT_EQ(pier_port_get_node_id(nullptr, &node), invalid);
  EXPECT_EQ(pier_port_max_node_id(nullptr, &node), invalid);
  EXPECT_EQ(pier_port_node_id_to_host_name(nullptr, 0, name, sizeof name), invalid);
  EXPECT_EQ(pier_port_host_name_to_node_id(nullptr, "localhost", &node), invalid);
  EXPECT_EQ(pier_port_get_host_name(nullptr, name, sizeof name), invalid);
  EXPECT_EQ(pier_port_set_acceptable_sizes(nullptr, 0, ~std::uint64_t{0}), invalid);
  EXPECT_EQ(pier_port_register_memory(nullptr, &msg, sizeof msg), invalid);
  EXPECT_EQ(pier_port_deregister_memory(nullptr, &msg, sizeof msg), invalid);
  EXPECT_EQ(pier_port_send_with_callback(nullptr, &msg, 4, sizeof msg, 0, 0, 0, nullptr, nullptr),
            invalid);
  EXPECT_EQ(
      pier_port_send_to_peer_with_callback(nullptr, &msg, 4, sizeof msg, 0, 0, nullptr, nullptr),
      invalid);
  EXPECT_EQ(pier_port_put(nullptr, &msg, 0, sizeof msg, 0, 0, 0, nullptr, nullptr), invalid);
  EXPECT_EQ(pier_port_get(nullptr, 0, &msg, sizeof msg, 0, 0, 0, nullptr, nullptr), invalid);
  EXPECT_EQ(pier_port_resume_sending(nullptr, 0, 0, 0, nullptr, nullptr), invalid);
  EXPECT_EQ(pier_port_drop_sends(nullptr, 0, 0, 0, nullptr, nullptr), invalid);
  EXPECT_EQ(pier_port_provide_receive_buffer_with_tag(nullptr, &msg, 4, 0, 0), invalid);
  EXPECT_EQ(pier_port_set_alarm(nullptr, &alarm, 10, nullptr, nullptr), invalid);
  EXPECT_EQ(pier_port_get_port_id(nullptr), 0u);
  EXPECT_EQ(pier_port_global_id(nullptr), 0u);
  EXPECT_EQ(pier_port_num_send_tokens(nullptr), 0u);
  EXPECT_EQ(pier_port_num_receive_tokens(nullptr), 0u);
  EXPECT_EQ(pier_port_send_tokens_held(nullptr), 0u);
  EXPECT_EQ(pier_port_receive_tokens_held(nullptr), 0u);
  EXPECT_EQ(pier_port_fast_max(nullptr), 0u);
  EXPECT_EQ(pier_port_receive_pending(nullptr), 0);
  EXPECT_EQ(pier_port_next_event_peek(nullptr, &node), PIER_PORT_NO_RECV_EVENT);
  EXPECT_EQ(pier_port_receive(nullptr)->type, PIER_PORT_NO_RECV_EVENT);
  EXPECT_EQ(pier_port_blocking_receive(nullptr, 1)->type, PIER_PORT_NO_RECV_EVENT);
  EXPECT_EQ(pier_port_blocking_receive_no_spin(nullptr, 1)->type, PIER_PORT_NO_RECV_EVENT);
  pier_port_event_t e{};
  pier_port_unknown(nullptr, &e);
  pier_port_cancel_alarm(nullptr, &alarm);
  pier_port_close(nullptr);
}

}  // namespace
