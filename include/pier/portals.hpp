// pier/portals.hpp: C++ RAII owners for the Portals 4 objects of portals4.h.
// Each owner holds one handle and releases it in its destructor (PtlFini,
// PtlNIFini, PtlPTFree, PtlMDRelease, PtlMEUnlink/PtlLEUnlink, PtlEQFree,
// PtlCTFree); owners move, never copy. Construction is set-up: a failing
// call throws pier::portals::Error carrying the PTL_* code. Data movement
// stays the plain C calls, on the handles that get() returns.
//
// Destruction order matters as it does in C: destroy entries, MDs, portal
// indexes, EQs and CTs before their NI, and the NI before the Library
// (declare them in the reverse order, as in the example below).
//
//   pier::portals::Library lib;
//   pier::portals::Ni ni(PTL_NI_MATCHING | PTL_NI_LOGICAL);
//   pier::portals::Eq eq(ni, 64);
//   pier::portals::PtIndex pt(ni, 0, eq);
//   pier::portals::Md md(ni, ptl_md_t{buf, len, 0, eq.get(), PTL_CT_NONE});
//   PtlPut(md.get(), 0, len, PTL_ACK_REQ, target, pt.index(), bits, 0, nullptr, 0);
#pragma once

#include <portals4.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace pier::portals {

/// A Portals call failed while building an object.
class Error : public std::runtime_error {
 public:
  Error(const char* call, int code)
      : std::runtime_error(std::string(call) + " failed with Portals code " + std::to_string(code)),
        code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

inline void check(const char* call, int rc) {
  if (rc != PTL_OK) throw Error(call, rc);
}

/// PtlInit for its lifetime (reference counted by the library).
class Library {
 public:
  Library() { check("PtlInit", PtlInit()); }
  ~Library() { PtlFini(); }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
};

/// Owns one handle released by `Release`; PTL_INVALID_HANDLE when empty.
template <int (*Release)(ptl_handle_any_t)>
class Owned {
 public:
  Owned() = default;
  explicit Owned(ptl_handle_any_t h) noexcept : h_(h) {}
  ~Owned() { reset(); }
  Owned(Owned&& o) noexcept : h_(std::exchange(o.h_, PTL_INVALID_HANDLE)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, PTL_INVALID_HANDLE);
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  ptl_handle_any_t get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != PTL_INVALID_HANDLE; }
  /// Gives the handle up without releasing it.
  ptl_handle_any_t release() noexcept { return std::exchange(h_, PTL_INVALID_HANDLE); }
  /// Releases now; returns the PTL_* code (PTL_OK when empty).
  int reset() noexcept {
    if (h_ == PTL_INVALID_HANDLE) return PTL_OK;
    return Release(std::exchange(h_, PTL_INVALID_HANDLE));
  }

 private:
  ptl_handle_any_t h_ = PTL_INVALID_HANDLE;
};

/// A network interface on the default interface.
class Ni : public Owned<PtlNIFini> {
 public:
  explicit Ni(unsigned options, const ptl_ni_limits_t* desired = nullptr,
              ptl_pid_t pid = PTL_PID_ANY, ptl_interface_t iface = PTL_IFACE_DEFAULT) {
    ptl_handle_ni_t h = PTL_INVALID_HANDLE;
    check("PtlNIInit", PtlNIInit(iface, options, pid, desired, &limits_, &h));
    static_cast<Owned&>(*this) = Owned(h);
  }
  const ptl_ni_limits_t& limits() const noexcept { return limits_; }
  ptl_process_t id() const {
    ptl_process_t p{};
    check("PtlGetId", PtlGetId(get(), &p));
    return p;
  }

 private:
  ptl_ni_limits_t limits_{};
};

class Eq : public Owned<PtlEQFree> {
 public:
  Eq(const Ni& ni, ptl_size_t count) {
    ptl_handle_eq_t h = PTL_INVALID_HANDLE;
    check("PtlEQAlloc", PtlEQAlloc(ni.get(), count, &h));
    static_cast<Owned&>(*this) = Owned(h);
  }
};

class Ct : public Owned<PtlCTFree> {
 public:
  explicit Ct(const Ni& ni) {
    ptl_handle_ct_t h = PTL_INVALID_HANDLE;
    check("PtlCTAlloc", PtlCTAlloc(ni.get(), &h));
    static_cast<Owned&>(*this) = Owned(h);
  }
  ptl_ct_event_t value() const {
    ptl_ct_event_t v{};
    check("PtlCTGet", PtlCTGet(get(), &v));
    return v;
  }
};

class Md : public Owned<PtlMDRelease> {
 public:
  Md(const Ni& ni, const ptl_md_t& md) {
    ptl_handle_md_t h = PTL_INVALID_HANDLE;
    check("PtlMDBind", PtlMDBind(ni.get(), &md, &h));
    static_cast<Owned&>(*this) = Owned(h);
  }
};

/// A match entry. One that unlinked itself (use-once, min_free) is already
/// gone: its destructor's PtlMEUnlink then reports PTL_ARG_INVALID, ignored.
class Me : public Owned<PtlMEUnlink> {
 public:
  Me(const Ni& ni, ptl_pt_index_t pt, const ptl_me_t& me, ptl_list_t list,
     void* user_ptr = nullptr) {
    ptl_handle_me_t h = PTL_INVALID_HANDLE;
    check("PtlMEAppend", PtlMEAppend(ni.get(), pt, &me, list, user_ptr, &h));
    static_cast<Owned&>(*this) = Owned(h);
  }
};

class Le : public Owned<PtlLEUnlink> {
 public:
  Le(const Ni& ni, ptl_pt_index_t pt, const ptl_le_t& le, ptl_list_t list,
     void* user_ptr = nullptr) {
    ptl_handle_le_t h = PTL_INVALID_HANDLE;
    check("PtlLEAppend", PtlLEAppend(ni.get(), pt, &le, list, user_ptr, &h));
    static_cast<Owned&>(*this) = Owned(h);
  }
};

/// A portal table index, freed with PtlPTFree.
class PtIndex {
 public:
  PtIndex(const Ni& ni, unsigned options, const Eq& eq, ptl_pt_index_t want = PTL_PT_ANY)
      : PtIndex(ni, options, eq.get(), want) {}
  PtIndex(const Ni& ni, unsigned options, ptl_handle_eq_t eq, ptl_pt_index_t want = PTL_PT_ANY)
      : ni_(ni.get()) {
    check("PtlPTAlloc", PtlPTAlloc(ni_, options, eq, want, &index_));
  }
  ~PtIndex() {
    if (ni_ != PTL_INVALID_HANDLE) PtlPTFree(ni_, index_);
  }
  PtIndex(PtIndex&& o) noexcept : ni_(std::exchange(o.ni_, PTL_INVALID_HANDLE)), index_(o.index_) {}
  PtIndex& operator=(PtIndex&&) = delete;
  PtIndex(const PtIndex&) = delete;
  PtIndex& operator=(const PtIndex&) = delete;
  ptl_pt_index_t index() const noexcept { return index_; }

 private:
  ptl_handle_ni_t ni_;
  ptl_pt_index_t index_ = 0;
};

}  // namespace pier::portals
