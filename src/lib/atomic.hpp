// pier::lib: atomic operations over Portals datatypes: the legality table
// (R-A1) and the element-wise apply (R-A2..R-A6).
#pragma once

#include <portals4.h>

#include <cstddef>

namespace pier::lib {

enum class AtomicFn : unsigned char { atomic, fetch_atomic, swap };

/// Size of one element of `type`; 0 for an unknown type.
std::size_t datatype_size(ptl_datatype_t type) noexcept;
/// The largest datatype_size() (long double complex).
inline constexpr std::size_t max_element_bytes = 32;

/// Whether `fn` may apply `op` to `type` (R-A1).
bool atomic_legal(AtomicFn fn, ptl_op_t op, ptl_datatype_t type) noexcept;

/// Applies `op` element-wise to `length` bytes at `target` with the
/// initiator's `data`; `operand` (one element) for the conditional swaps and
/// MSWAP. When `old` is non-null the prior target bytes are copied there
/// first. A trailing partial element is ignored (the initiator refuses one,
/// so only a hostile peer sends it). False if illegal.
bool apply_atomic(ptl_op_t op, ptl_datatype_t type, void* target, const void* data,
                  const void* operand, std::size_t length, void* old) noexcept;

}  // namespace pier::lib
