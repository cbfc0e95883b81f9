#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs a tiny
# program against it twice: through pkg-config and through find_package(pier).
# Usage: install_test.sh <build-dir> <c++ compiler> [extra compile/link flags]
set -euo pipefail
build=$1
cxx=$2
extra=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || {
  cat "$tmp/install.log"
  exit 1
}
test -e "$tmp/prefix/include/pier/status.hpp"
test -n "$(ls "$tmp"/prefix/lib*/libpier.so 2>/dev/null || ls "$tmp"/prefix/lib/*/libpier.so)"

# pier has no public C++ entry point yet (portals4.h will be one); the
# registry's get_text is exported from libpier.so, so declare it here.
cat >"$tmp/user.cpp" <<'CPP'
#include <pier/result.hpp>
#include <pier/status.hpp>

#include <cstdio>
#include <string>
#include <string_view>

namespace pier::config {
Result<std::string> get_text(std::string_view name);
}

int main() {
  pier::Result<std::string> level = pier::config::get_text("LOG");
  if (!level) {
    std::printf("get_text: %s\n", std::string(pier::to_string(level.status())).c_str());
    return 1;
  }
  std::printf("installed pier answers PIER_LOG=%s\n", level->c_str());
  return 0;
}
CPP

pc_dir=$(dirname "$(find "$tmp/prefix" -name pier.pc | head -1)")
export PKG_CONFIG_PATH="$pc_dir"
flags=$(pkg-config --cflags --libs pier)
# shellcheck disable=SC2086 # flags are words
"$cxx" -std=c++20 $extra "$tmp/user.cpp" -o "$tmp/user_pc" $flags
libdir=$(pkg-config --variable=libdir pier)
PIER_LOG=info LD_LIBRARY_PATH="$libdir" "$tmp/user_pc" | tee "$tmp/out_pc"
grep -q "PIER_LOG=info" "$tmp/out_pc"

mkdir -p "$tmp/cm"
cp "$tmp/user.cpp" "$tmp/cm/user.cpp"
cat >"$tmp/cm/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(pier_user CXX)
find_package(pier REQUIRED)
add_executable(user user.cpp)
target_link_libraries(user PRIVATE pier::pier)
CMAKE
cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" \
  >"$tmp/cm.log" 2>&1 || {
  cat "$tmp/cm.log"
  exit 1
}
cmake --build "$tmp/cm/build" >>"$tmp/cm.log" 2>&1 || {
  cat "$tmp/cm.log"
  exit 1
}
PIER_LOG=debug "$tmp/cm/build/user" | tee "$tmp/out_cm"
grep -q "PIER_LOG=debug" "$tmp/out_cm"

if [ -x "$tmp/prefix/bin/pier-info" ]; then
  "$tmp/prefix/bin/pier-info" --json --config >"$tmp/info.json"
  grep -q '"PIER_LOG"' "$tmp/info.json"
fi
echo "install: pkg-config and find_package(pier) both build and run against $tmp/prefix"
