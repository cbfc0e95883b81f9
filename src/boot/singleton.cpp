// pier::boot: a process started alone is rank 0 of 1. The exchange still
// honours put / commit / fence so code written for N ranks runs unchanged.
#include "boot/backends.hpp"

namespace pier::boot {
namespace {

class Singleton final : public Bootstrap {
 public:
  Singleton() : Bootstrap(0, 1) {}
  std::string_view method() const noexcept override { return "singleton"; }

  Status commit() override {
    for (auto& [key, value] : take_staged()) committed_[key] = std::move(value);
    return Status::ok;
  }

  Status fence(Deadline) override {
    for (auto& [key, value] : committed_) visible_[{0, key}] = std::move(value);
    committed_.clear();
    return Status::ok;
  }

 private:
  std::map<std::string, std::vector<std::byte>> committed_;
};

}  // namespace

std::unique_ptr<Bootstrap> open_singleton() {
  return std::make_unique<Singleton>();
}

}  // namespace pier::boot
