# The two commands of the README. Each sets itself up on a fresh Debian 12.
BUILD ?= build/release
JOBS ?= $(shell nproc)

.PHONY: run test setup build asan tsan fuzz format format-check tidy clean

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake --preset release >/dev/null

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

run: build
	@bash scripts/run.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300 || { bash $(CURDIR)/scripts/failure-summary.sh $(abspath $(BUILD)); exit 1; }

asan: setup
	cmake --preset asan >/dev/null
	cmake --build build/asan -j $(JOBS)
	cd build/asan && LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --output-on-failure -j $(JOBS) --timeout 600 -LE nosan || { bash $(CURDIR)/scripts/failure-summary.sh $(CURDIR)/build/asan; exit 1; }

tsan: setup
	cmake --preset tsan >/dev/null
	cmake --build build/tsan -j $(JOBS)
	cd build/tsan && ctest --output-on-failure -j $(JOBS) --timeout 600 -L tsan || { bash $(CURDIR)/scripts/failure-summary.sh $(CURDIR)/build/tsan; exit 1; }

fuzz: setup
	cmake --preset fuzz >/dev/null
	cmake --build build/fuzz -j $(JOBS) --target pier_fuzz_targets
	bash scripts/fuzz.sh build/fuzz $${FUZZ_SECONDS:-60}

format:
	git ls-files '*.cpp' '*.hpp' '*.h' '*.c' | xargs clang-format -i

format-check: setup
	git ls-files '*.cpp' '*.hpp' '*.h' '*.c' | xargs clang-format --dry-run -Werror

# clang-tidy (checks in .clang-tidy) over the library sources, from the
# release build's compile_commands.json without the g++-only code generation
# flags (-m*-strategy), which clang rejects.
tidy: build
	mkdir -p build/tidy
	sed -E 's/ -m(memset|memcpy)-strategy=[^ "]*//g' $(BUILD)/compile_commands.json > build/tidy/compile_commands.json
	run-clang-tidy -p build/tidy -quiet -j $(JOBS) -extra-arg=-Wno-unknown-warning-option '$(CURDIR)/src/.*'

clean:
	rm -rf build
