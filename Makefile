# qkv — the two set-up commands: `make demo` (main job) and `make test` (the test suite).
# Each installs missing Debian packages (idempotent), configures and builds first.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=
QKV     := $(BUILD)/bin/qkv

.PHONY: all deps configure build test test-asan demo bench clean

all: build

deps:
	@bash scripts/install_deps.sh

configure: deps
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE "bench|slow"

# Unit tests under AddressSanitizer + UBSan (second CI stage).
test-asan: deps
	@test -f build-asan/build.ninja || cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DQKV_SANITIZE="address;undefined" -DQKV_BUILD_BENCH=OFF
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) -LE "bench|slow|cli"

demo: build
	@bash scripts/demo.sh $(QKV)

bench: build
	@ls $(BUILD)/bench

clean:
	rm -rf $(BUILD) build-asan
