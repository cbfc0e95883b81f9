// pier lib: atomic operations. Atomicity among Portals operations comes
// from the LIB running one at a time (R-A7). Elements of 1 to 16 bytes at
// aligned addresses are also updated with the host's own atomic
// instructions (a compare-and-swap loop; 16 bytes through libatomic), so
// that the process's own atomics on the same words, in other threads, lose
// nothing (PTL_COHERENT_ATOMICS): an OpenSHMEM PE updates its symmetric
// memory locally while its peers update it through Portals. Other elements
// (long double complex, misaligned ones) are loaded and stored with memcpy,
// so a misaligned target costs speed, not undefined behaviour; so is an
// element split between two iovec elements of the target, which the LIB
// gathers into a copy first (target.cpp).
#include "lib/atomic.hpp"

#include <cfloat>
#include <complex>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace pier::lib {

namespace {

template <class T>
struct IsComplex : std::false_type {};
template <class T>
struct IsComplex<std::complex<T>> : std::true_type {};

enum class Class { integer, real, long_real, complex, long_complex };

Class class_of(ptl_datatype_t t) {
  switch (t) {
    case PTL_FLOAT:
    case PTL_DOUBLE:
      return Class::real;
    case PTL_LONG_DOUBLE:
      return Class::long_real;
    case PTL_FLOAT_COMPLEX:
    case PTL_DOUBLE_COMPLEX:
      return Class::complex;
    case PTL_LONG_DOUBLE_COMPLEX:
      return Class::long_complex;
    default:
      return Class::integer;
  }
}

template <class T>
bool apply_one(ptl_op_t op, T& t, const T& d, const T& operand) {
  if constexpr (IsComplex<T>::value) {
    switch (op) {
      case PTL_SUM:
        t = t + d;
        return true;
      case PTL_PROD:
        t = t * d;
        return true;
      case PTL_SWAP:
        t = d;
        return true;
      case PTL_CSWAP:
        if (operand == t) t = d;
        return true;
      case PTL_CSWAP_NE:
        if (operand != t) t = d;
        return true;
      default:
        return false;
    }
  } else {
    switch (op) {
      case PTL_MIN:
        t = d < t ? d : t;
        return true;
      case PTL_MAX:
        t = d > t ? d : t;
        return true;
      case PTL_SUM:
        if constexpr (std::is_integral_v<T>)  // modular, as the hardware does
          t = static_cast<T>(static_cast<std::uint64_t>(t) + static_cast<std::uint64_t>(d));
        else
          t = t + d;
        return true;
      case PTL_PROD:
        if constexpr (std::is_integral_v<T>)
          t = static_cast<T>(static_cast<std::uint64_t>(t) * static_cast<std::uint64_t>(d));
        else
          t = t * d;
        return true;
      case PTL_SWAP:
        t = d;
        return true;
      case PTL_CSWAP:
        if (operand == t) t = d;
        return true;
      case PTL_CSWAP_NE:
        if (operand != t) t = d;
        return true;
      case PTL_CSWAP_LE:
        if (operand <= t) t = d;
        return true;
      case PTL_CSWAP_LT:
        if (operand < t) t = d;
        return true;
      case PTL_CSWAP_GE:
        if (operand >= t) t = d;
        return true;
      case PTL_CSWAP_GT:
        if (operand > t) t = d;
        return true;
      default:
        break;
    }
    if constexpr (std::is_integral_v<T>) {
      switch (op) {
        case PTL_LOR:
          t = static_cast<T>((d || t) ? 1 : 0);
          return true;
        case PTL_LAND:
          t = static_cast<T>((d && t) ? 1 : 0);
          return true;
        case PTL_LXOR:
          t = static_cast<T>(((d != 0) != (t != 0)) ? 1 : 0);
          return true;
        case PTL_BOR:
          t = static_cast<T>(t | d);
          return true;
        case PTL_BAND:
          t = static_cast<T>(t & d);
          return true;
        case PTL_BXOR:
          t = static_cast<T>(t ^ d);
          return true;
        case PTL_MSWAP:
          t = static_cast<T>((d & operand) | (t & ~operand));
          return true;
        default:
          return false;
      }
    }
    return false;
  }
}

#ifdef __SIZEOF_INT128__
// 16-byte elements (double complex, long double) go through libatomic, which
// uses the host's 16-byte compare-and-swap (cmpxchg16b) where the CPU has it,
// as the host's own 16-byte atomics do, so the two stay coherent.
using HostWord16 = unsigned __int128;
#else
using HostWord16 = void;
#endif

/// The unsigned integer of `n` bytes the host updates atomically, or void.
template <std::size_t n>
using HostWord = std::conditional_t<
    n == 1, std::uint8_t,
    std::conditional_t<
        n == 2, std::uint16_t,
        std::conditional_t<n == 4, std::uint32_t,
                           std::conditional_t<n == 8, std::uint64_t,
                                              std::conditional_t<n == 16, HostWord16, void>>>>>;

/// Applies `op` to the element at `at` with compare-and-swap until no other
/// writer came between our load and our store; `old` gets the value replaced.
template <class T>
bool apply_coherent(ptl_op_t op, unsigned char* at, const T& d, const T& opnd, unsigned char* old) {
  using W = HostWord<sizeof(T)>;
  W* word = reinterpret_cast<W*>(at);
  W seen = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    T t;
    std::memcpy(static_cast<void*>(&t), &seen, sizeof(T));
    if (!apply_one<T>(op, t, d, opnd)) return false;
    W next;
    std::memcpy(&next, &t, sizeof(T));
#if LDBL_MANT_DIG == 64
    // An x87 long double fills 10 of its 16 bytes; the rest is padding that
    // arithmetic leaves unspecified. It is stored as zero, as the host's own
    // atomic<long double> expects from GCC 13 on (it clears the padding of
    // what it compares): otherwise its compare-and-swap could never succeed.
    if constexpr (std::is_same_v<T, long double>)
      std::memset(reinterpret_cast<unsigned char*>(&next) + 10, 0, sizeof(T) - 10);
#endif
    if (__atomic_compare_exchange_n(word, &seen, next, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      break;
  }
  if (old) std::memcpy(old, &seen, sizeof(T));
  return true;
}

template <class T>
bool apply_typed(ptl_op_t op, void* target, const void* data, const void* operand,
                 std::size_t length, void* old) {
  std::size_t n = length / sizeof(T);
  auto* tb = static_cast<unsigned char*>(target);
  const auto* db = static_cast<const unsigned char*>(data);
  auto* ob = static_cast<unsigned char*>(old);
  T opnd{};
  if (operand) std::memcpy(&opnd, operand, sizeof(T));
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char* at = tb + i * sizeof(T);
    unsigned char* was = ob ? ob + i * sizeof(T) : nullptr;
    T t, d;
    std::memcpy(&d, db + i * sizeof(T), sizeof(T));
    if constexpr (!std::is_void_v<HostWord<sizeof(T)>>) {
      if (reinterpret_cast<std::uintptr_t>(at) % sizeof(T) == 0) {
        if (!apply_coherent<T>(op, at, d, opnd, was)) return false;
        continue;
      }
    }
    std::memcpy(&t, at, sizeof(T));
    if (was) std::memcpy(was, &t, sizeof(T));
    if (!apply_one<T>(op, t, d, opnd)) return false;
    std::memcpy(at, &t, sizeof(T));
  }
  return true;
}

}  // namespace

std::size_t datatype_size(ptl_datatype_t type) noexcept {
  switch (type) {
    case PTL_INT8_T:
    case PTL_UINT8_T:
      return 1;
    case PTL_INT16_T:
    case PTL_UINT16_T:
      return 2;
    case PTL_INT32_T:
    case PTL_UINT32_T:
    case PTL_FLOAT:
      return 4;
    case PTL_INT64_T:
    case PTL_UINT64_T:
    case PTL_DOUBLE:
    case PTL_FLOAT_COMPLEX:
      return 8;
    case PTL_DOUBLE_COMPLEX:
      return 16;
    case PTL_LONG_DOUBLE:
      return sizeof(long double);
    case PTL_LONG_DOUBLE_COMPLEX:
      static_assert(sizeof(std::complex<long double>) <= max_element_bytes);
      return sizeof(std::complex<long double>);
    default:
      return 0;
  }
}

bool atomic_legal(AtomicFn fn, ptl_op_t op, ptl_datatype_t type) noexcept {
  if (op >= PTL_OP_LAST || type >= PTL_DATATYPE_LAST) return false;
  bool swap_family = op >= PTL_SWAP;
  if ((fn == AtomicFn::swap) != swap_family) return false;
  Class c = class_of(type);
  switch (op) {
    case PTL_MIN:
    case PTL_MAX:
    case PTL_CSWAP_LE:
    case PTL_CSWAP_LT:
    case PTL_CSWAP_GE:
    case PTL_CSWAP_GT:
      return c != Class::complex && c != Class::long_complex;
    case PTL_SUM:
    case PTL_PROD:
    case PTL_SWAP:
    case PTL_CSWAP:
    case PTL_CSWAP_NE:
      return true;
    default:
      return c == Class::integer;  // logical, bitwise, MSWAP
  }
}

bool apply_atomic(ptl_op_t op, ptl_datatype_t type, void* target, const void* data,
                  const void* operand, std::size_t length, void* old) noexcept {
  switch (type) {
    case PTL_INT8_T:
      return apply_typed<std::int8_t>(op, target, data, operand, length, old);
    case PTL_UINT8_T:
      return apply_typed<std::uint8_t>(op, target, data, operand, length, old);
    case PTL_INT16_T:
      return apply_typed<std::int16_t>(op, target, data, operand, length, old);
    case PTL_UINT16_T:
      return apply_typed<std::uint16_t>(op, target, data, operand, length, old);
    case PTL_INT32_T:
      return apply_typed<std::int32_t>(op, target, data, operand, length, old);
    case PTL_UINT32_T:
      return apply_typed<std::uint32_t>(op, target, data, operand, length, old);
    case PTL_FLOAT:
      return apply_typed<float>(op, target, data, operand, length, old);
    case PTL_INT64_T:
      return apply_typed<std::int64_t>(op, target, data, operand, length, old);
    case PTL_UINT64_T:
      return apply_typed<std::uint64_t>(op, target, data, operand, length, old);
    case PTL_DOUBLE:
      return apply_typed<double>(op, target, data, operand, length, old);
    case PTL_FLOAT_COMPLEX:
      return apply_typed<std::complex<float>>(op, target, data, operand, length, old);
    case PTL_DOUBLE_COMPLEX:
      return apply_typed<std::complex<double>>(op, target, data, operand, length, old);
    case PTL_LONG_DOUBLE:
      return apply_typed<long double>(op, target, data, operand, length, old);
    case PTL_LONG_DOUBLE_COMPLEX:
      return apply_typed<std::complex<long double>>(op, target, data, operand, length, old);
    default:
      return false;
  }
}

}  // namespace pier::lib
