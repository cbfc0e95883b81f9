/* pier/port.h compiles as C99 on its own. */
#include <pier/port.h>

unsigned pier_port_c_header_check(void);
unsigned pier_port_c_header_check(void) {
  pier_port_event_t e = {0};
  pier_port_alarm_t a;
  pier_port_initialize_alarm(&a);
  return (unsigned)e.type + pier_port_min_size_for_length(0);
}
