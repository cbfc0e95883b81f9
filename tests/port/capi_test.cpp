// The C entry points of pier/port.h in one process: argument checks that a
// cast used to defeat, and handles that outlive pier_port_finalize().
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

}  // namespace
