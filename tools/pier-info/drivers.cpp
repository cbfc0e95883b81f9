// pier-info: the drivers built in, whether each can run here (and why not),
// their capabilities and profile; the core's protocol thresholds; and the
// bootstrap back end this process would use.
//
// Each driver gets a fresh context, is asked for its properties and, unless
// --no-init, brought up and closed again: some reasons (shm's abstract socket,
// ofi's provider) are only known once init() has tried. Init is cheap for
// every driver (a socket or a segment, released by close()).
#include "sections.hpp"

#include "base/config.hpp"
#include "boot/pmix.hpp"
#include "core/core.hpp"
#ifndef PIER_INFO_OFI
#define PIER_INFO_OFI 0
#endif
#if PIER_INFO_OFI
#include "drivers/ofi/ofi.hpp"
#endif

#include <pier/driver.hpp>

#include <fmt/format.h>

namespace pier::tools::info {
namespace {

nlohmann::json caps_json(const driver::Caps& c) {
  return {{"supports_data", c.supports_data},
          {"send_buf", c.send_buf},
          {"recv_buf", c.recv_buf},
          {"recv_post", c.recv_post},
          {"max_iov", c.max_iov},
          {"blocking_wait", c.blocking_wait},
          {"recv_any", c.recv_any},
          {"wait_fds", c.wait_fds},
          {"prefetch", c.prefetch},
          {"rdv_data", c.rdv_data},
          {"max_packet", c.max_packet},
          {"needs_rdv", c.needs_rdv},
          {"incoming", c.incoming}};
}

std::string caps_text(const driver::Caps& c) {
  std::string flags;
  auto flag = [&](bool on, const char* name) {
    if (on) flags += fmt::format("{}{}", flags.empty() ? "" : " ", name);
  };
  flag(c.supports_data, "data");
  flag(c.send_buf, "send_buf");
  flag(c.recv_buf, "recv_buf");
  flag(c.recv_post, "recv_post");
  flag(c.blocking_wait, "blocking_wait");
  flag(c.recv_any, "recv_any");
  flag(c.wait_fds, "wait_fds");
  flag(c.prefetch, "prefetch");
  flag(c.rdv_data, "rdv_data");
  flag(c.needs_rdv, "needs_rdv");
  flag(c.incoming, "incoming");
  return fmt::format("{}; max_iov {}; max_packet {}", flags.empty() ? "no flags" : flags, c.max_iov,
                     c.max_packet == 0 ? std::string("unlimited") : std::to_string(c.max_packet));
}

nlohmann::json profile_json(const driver::Profile& p) {
  return {{"latency_ns", p.latency_ns},
          {"bandwidth_mbps", p.bandwidth_mbps},
          {"numa_node", p.numa_node},
          {"cpuset", p.cpuset}};
}

/// What one driver says about itself here.
struct Probe {
  bool made = false;
  bool usable = false;
  std::string reason;    ///< why not usable, or a note when usable
  std::string degraded;  ///< what it runs without here, as far as it knows alone
  bool have_props = false;
  driver::Properties props;
  std::size_t url_bytes = 0;
};

Probe probe(std::string_view spec, bool init) {
  Probe out;
  auto ctx = driver::make_context(spec);
  if (!ctx) {
    out.reason = fmt::format("cannot make a context: {} ({})", describe(ctx.status()),
                             to_string(ctx.status()));
    return out;
  }
  out.made = true;
  driver::Context& c = **ctx;
  driver::Hints hints;
  hints.session_size = 2;  // as for a job of two: describes what a peer would get
  auto props = c.properties(hints);
  if (props) {
    out.have_props = true;
    out.props = *props;
  }
  if (!props) {
    out.reason = c.unavailable_reason();
    if (out.reason.empty())
      out.reason = fmt::format("properties() failed: {} ({}); the driver's log on stderr says why",
                               describe(props.status()), to_string(props.status()));
    return out;
  }
  if (init) {
    auto url = c.init();
    if (url) {
      out.url_bytes = url->size();
      out.degraded = c.degraded_reason();  // before close() forgets it
      (void)c.close();
    } else {
      out.reason = c.unavailable_reason();
      if (out.reason.empty())
        out.reason = fmt::format("init() failed: {} ({}); the driver's log on stderr says why",
                                 describe(url.status()), to_string(url.status()));
      return out;
    }
  }
  // A usable driver may still say something (shm: single copy refused).
  out.usable = true;
  out.reason = c.unavailable_reason();
  if (out.degraded.empty()) out.degraded = c.degraded_reason();
  return out;
}

}  // namespace

void section_drivers(Sink& out, const Options& options) {
  out.begin("drivers");
  out.field("probed_with_init", options.init_drivers);
  out.list("drivers");
  for (const driver::DriverEntry& entry : driver::builtin_drivers()) {
    // A wrapper needs something to wrap: describe it around self.
    const bool wrapper = entry.name == "fault";
    const std::string spec = wrapper ? "fault:self" : std::string(entry.name);
    const Probe p = probe(spec, options.init_drivers);
    nlohmann::json data = {{"name", entry.name},    {"summary", entry.summary},
                           {"probed_as", spec},     {"usable", p.usable},
                           {"reason", p.reason},    {"wrapper", wrapper},
                           {"degraded", p.degraded}};
    std::string text =
        fmt::format("{}: {}{}\n      {}", entry.name, p.usable ? "usable" : "NOT usable",
                    p.reason.empty() ? "" : " (" + p.reason + ")", entry.summary);
    if (!p.degraded.empty()) text += fmt::format("\n      degraded: {}", p.degraded);
    if (p.have_props) {
      data["caps"] = caps_json(p.props.caps);
      data["profile"] = profile_json(p.props.profile);
      text += fmt::format("\n      caps: {}", caps_text(p.props.caps));
      text += fmt::format("\n      profile: latency {} ns, bandwidth {} MB/s, numa node {}{}",
                          p.props.profile.latency_ns, p.props.profile.bandwidth_mbps,
                          p.props.profile.numa_node,
                          p.props.profile.cpuset.empty() ? "" : ", cpus " + p.props.profile.cpuset);
      // What the core makes of it: the largest eager message over this driver.
      const std::size_t eager =
          core::eager_limit_for(p.props, core::Settings::from_config().eager_limit);
      data["eager_limit"] = eager;
      text +=
          fmt::format("\n      eager limit: {} bytes (larger messages use the rendezvous)", eager);
    }
    if (p.usable && options.init_drivers) {
      data["url_bytes"] = p.url_bytes;
      text += fmt::format("\n      url: {} bytes", p.url_bytes);
    }
    if (wrapper) text += fmt::format("\n      (shown wrapping self; use {}:<driver>)", entry.name);
    out.item("drivers", data, text);
  }
}

void section_ofi_providers(Sink& out, const Options&) {
  out.begin("ofi_providers");
  out.field("built", PIER_INFO_OFI != 0);
  out.list("providers");
#if PIER_INFO_OFI
  for (const drivers::ofi::ProviderReport& r : drivers::ofi::survey()) {
    nlohmann::json data = {{"name", r.name},   {"fabric", r.fabric}, {"domain", r.domain},
                           {"rdm", r.rdm},     {"tagged", r.tagged}, {"rma", r.rma},
                           {"taken", r.taken}, {"reason", r.reason}};
    std::string text =
        fmt::format("{}{}: fabric {}, domain {}\n      {}", r.taken ? "* " : "", r.name,
                    r.fabric.empty() ? "-" : r.fabric, r.domain.empty() ? "-" : r.domain, r.reason);
    out.item("providers", data, text);
  }
#endif
}

void section_thresholds(Sink& out, const Options&) {
  const core::Settings s = core::Settings::from_config();
  out.begin("thresholds");
  out.field("drivers", s.drivers);
  out.field("connect", s.eager_connect ? "eager" : "lazy");
  // 0 is the core's "automatic": a limit per driver, shown with each driver.
  out.field("eager_limit", s.eager_limit);
  out.field("eager_limit_auto", s.eager_limit == 0);
  out.field("split_min", s.split_min);
  out.field("credits", s.credits);
  out.field("send_msgs", s.send_msgs);
  out.field("recv_msgs", s.recv_msgs);
  out.field("spin_us", s.spin_us);
  out.field("gap_limit_ms", s.gap_limit_ms);
}

void section_bootstrap(Sink& out, const Options&) {
  out.begin("bootstrap");
  auto key = [](std::string_view name) {
    auto v = config::get_text(name);
    return v ? *v : std::string();
  };
  const std::string method = key("BOOT_METHOD");
  const std::string_view external = boot::detect_external();
  // The choice Bootstrap::open() makes in auto mode.
  std::string choice = method;
  if (method == "auto")
    choice = !key("RUN_SOCKET").empty() ? "pier-run"
             : !external.empty()        ? std::string(external)
                                        : "singleton";
  out.field("method", method);
  out.field("would_use", choice);
  out.field("pmix_built", boot::have_pmix());
}

}  // namespace pier::tools::info
