// pier: the door of src/base. Everything below every other layer: the status
// list and Result, the configuration registry, logging, object pools,
// lock-free queues, an annotated mutex and the monotonic clock.
#pragma once

#include <pier/result.hpp>
#include <pier/status.hpp>

#include "base/clock.hpp"
#include "base/config.hpp"
#include "base/log.hpp"
#include "base/mpsc_queue.hpp"
#include "base/mutex.hpp"
#include "base/pool.hpp"
#include "base/spsc_queue.hpp"
