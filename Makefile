# qkv — the two set-up commands: `make demo` (main job) and `make test` (the test suite).
# Each installs missing Debian packages (idempotent), configures and builds first.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=
QKV     := $(BUILD)/bin/qkv

.PHONY: all deps configure build test test-asan test-install demo bench clean fuzz-build fuzz fuzz-ci

all: build

deps:
	@bash scripts/install_deps.sh

configure: deps
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE "bench|slow"

# Unit tests under AddressSanitizer + UBSan (second CI stage). QKV_SANITIZE compiles at -O1 -g1
# (CMakeLists.txt). UBSan is fatal
# (-fno-sanitize-recover=undefined in CMakeLists.txt, halt_on_error here); suppressions cover
# third-party frames only (tests/sanitizers/*.supp, each entry says why).
ASAN_BUILD ?= build-asan
SAN_DIR    := $(CURDIR)/tests/sanitizers
SAN_ENV    := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1 \
              LSAN_OPTIONS=suppressions=$(SAN_DIR)/lsan.supp \
              UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$(SAN_DIR)/ubsan.supp

test-asan: deps
	@test -f $(ASAN_BUILD)/build.ninja || cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DQKV_SANITIZE="address;undefined" -DQKV_BUILD_BENCH=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && $(SAN_ENV) ctest --output-on-failure -j $(JOBS) -LE "bench|slow"

# Install test from scratch (ctest install.fresh, label `slow`): a fresh tree, library target only, installed
# into a temporary prefix, then tests/install/consumer built with find_package(qkv) and run.
test-install: deps
	JOBS=$(JOBS) bash tests/install/test_install.sh $(CURDIR)

# Fuzzing (tests/fuzz/README.md): clang-14 + libFuzzer with ASan + UBSan, in build-fuzz/ (the
# library and tests/fuzz/fuzz_*.cpp only). `make fuzz FUZZ_SECONDS=N` runs every target for N
# seconds after its seed corpus (new inputs go to build-fuzz/fuzz/work/<name>/, a crash to
# build-fuzz/fuzz/work/<name>-crash-*); `make fuzz-ci` is CI's regression pass (ctest -L fuzz: each
# target's corpus, then a few seconds of fuzzing).
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(patsubst tests/fuzz/fuzz_%.cpp,%,$(wildcard tests/fuzz/fuzz_*.cpp))

fuzz-build: deps
	@test -f $(FUZZ_BUILD)/build.ninja || cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DQKV_FUZZ=ON -DQKV_BUILD_TESTS=OFF \
	    -DQKV_BUILD_APPS=OFF -DQKV_BUILD_BENCH=OFF -DQKV_BUILD_EXAMPLES=OFF $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	    echo "=== fuzz_$$t: $(FUZZ_SECONDS) s"; \
	    bash tests/fuzz/run_fuzz.sh $(FUZZ_BUILD)/fuzz/fuzz_$$t tests/fuzz/corpus/$$t $(FUZZ_BUILD)/fuzz/work/$$t \
	        $(FUZZ_SECONDS) || exit 1; \
	done

fuzz-ci: fuzz-build
	cd $(FUZZ_BUILD) && ctest --output-on-failure -L fuzz

demo: build
	@bash scripts/demo.sh $(QKV)

bench: build
	@ls $(BUILD)/bench

# Python package (docs/python.md): builds the module _qkv and installs `qkv` into the site directory of
# /usr/bin/python3 (/usr/local/lib/python3.11/dist-packages on Debian 12), so `python3 -c "import qkv"` works.
.PHONY: python
python: configure
	cmake -S . -B $(BUILD) -DQKV_BUILD_PYTHON=ON > /dev/null
	cmake --build $(BUILD) -j $(JOBS) --target python_install

# The chapter as Jupyter notebooks (notebooks/, docs/notebooks.md). `make notebooks` builds the module and
# starts Debian's jupyter-notebook on the folder, on 127.0.0.1 without a browser, `qkv` importable from
# the build (PYTHONPATH); open the URL it prints (as root, e.g. in a container, with --allow-root). `make notebooks-html` executes every notebook (short
# runs; QKV_NOTEBOOK_FULL=1 for the long ones) and exports it to $(BUILD)/notebooks-html/.
NB_ENV := PYTHONPATH=$(abspath $(BUILD))/python OMP_WAIT_POLICY=passive PYDEVD_DISABLE_FILE_VALIDATION=1
.PHONY: notebooks notebooks-html
notebooks: configure
	cmake -S . -B $(BUILD) -DQKV_BUILD_PYTHON=ON > /dev/null
	cmake --build $(BUILD) -j $(JOBS) --target _qkv
	@echo "qkv: starting Jupyter on notebooks/ (qkv from $(BUILD)/python); open the URL below (Ctrl-C stops it)"
	cd notebooks && $(NB_ENV) jupyter-notebook --ip 127.0.0.1 --no-browser $(if $(filter 0,$(shell id -u)),--allow-root)

notebooks-html: configure
	cmake -S . -B $(BUILD) -DQKV_BUILD_PYTHON=ON > /dev/null
	cmake --build $(BUILD) -j $(JOBS) --target _qkv
	$(NB_ENV) /usr/bin/python3 -m nbconvert --to html --execute --ExecutePreprocessor.timeout=1800 \
	    --output-dir $(abspath $(BUILD))/notebooks-html notebooks/*.ipynb
	@echo "qkv: HTML in $(BUILD)/notebooks-html/"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
