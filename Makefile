# polykv - one Makefile.  `make` builds build/polykv; `make test` installs
# what is missing, builds and runs every test; see README.md.

CC      ?= gcc
CSTD    := -std=c11 -D_GNU_SOURCE
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter
OPT     ?= -O2 -g
CFLAGS  := $(CSTD) $(WARN) $(OPT) -fno-math-errno -pthread -MMD -MP
LDLIBS  := -lmicrohttpd -ljansson -lxxhash -lcurl -lzmq -lmsgpackc -lm -pthread

# Instruction-set flags go on the kernel files that need them, nowhere else,
# so one binary runs on any x86-64 and picks its kernels at start.
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16

BUILD ?= build
LIB_SRC  := $(sort $(filter-out src/cli/%,$(wildcard src/*/*.c)))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(filter-out tests/test_fault.c,$(wildcard tests/test_*.c)))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCHES  := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

# Debian packages the build and tests need; `make deps` installs the missing.
DEB_PKGS := gcc make clang libjansson-dev libmicrohttpd-dev libxxhash-dev libcurl4-openssl-dev libzmq3-dev libmsgpack-dev nodejs npm python3 python3-venv chromium git

.PHONY: all deps run test test-asan test-tsan test-fault bench fuzz clean
all: $(BUILD)/polykv

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -c $< -o $@
$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -c $< -o $@
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The monitor page (docs/monitor.md): web/build.mjs bundles web/src with
# esbuild (from web/package-lock.json) into a C source the binary serves.
WEB_SRC  := $(sort $(wildcard web/src/*)) web/build.mjs
PAGE_OBJ := $(BUILD)/obj/gen/page_assets.o
web/node_modules/.ci-stamp: web/package.json web/package-lock.json
	cd web && npm ci --no-audit --no-fund --loglevel=error
	@touch $@
$(BUILD)/gen/page_assets.c: $(WEB_SRC) web/node_modules/.ci-stamp
	node web/build.mjs $(BUILD)/gen
$(PAGE_OBJ): $(BUILD)/gen/page_assets.c src/server/srv_page.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Isrc/server -c $< -o $@

$(BUILD)/libpolykv.a: $(LIB_OBJ) $(PAGE_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/polykv: $(CLI_OBJ) $(BUILD)/libpolykv.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/libpolykv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/libpolykv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

deps:
	@sh scripts/deps.sh $(DEB_PKGS)

# MODEL=path serves a GGUF, MODEL=hf:USER/REPO[:QUANT] a model by name from
# the Hugging Face hub (docs/models.md); without it, Qwen3.5 0.8B from the
# hub, or offline a random-weight demo model gen-model makes once.
run: deps all
	@sh scripts/run.sh $(BUILD)/polykv "$(MODEL)"

test: deps all $(TESTS) $(BUILD)/venv/.installed $(BUILD)/venv/.jinja $(BUILD)/venv/.pretok $(BUILD)/venv/.kv_events \
      $(BUILD)/vocab/gpt-oss-o200k.gguf
	@sh tests/run.sh $(BUILD)

# The Python package's tests (clients/python): a venv under build/ with the
# pinned test requirements, then the package itself (reinstalled when it changes).
PY_DIR := clients/python
$(BUILD)/venv/.installed: $(PY_DIR)/requirements-test.txt $(PY_DIR)/pyproject.toml $(wildcard $(PY_DIR)/polykv_langgraph/*.py)
	python3 -m venv $(BUILD)/venv
	$(BUILD)/venv/bin/pip install -q --disable-pip-version-check -r $(PY_DIR)/requirements-test.txt
	$(BUILD)/venv/bin/pip install -q --disable-pip-version-check --no-deps --force-reinstall ./$(PY_DIR)
	@touch $@

# The Jinja oracle's jinja2 (tests/jinja), pinned, in the same venv.
$(BUILD)/venv/.jinja: tests/jinja/requirements.txt $(BUILD)/venv/.installed
	$(BUILD)/venv/bin/pip install -q --disable-pip-version-check -r tests/jinja/requirements.txt
	@touch $@

# gpt-oss's vocabulary for test_tok, written from the o200k ranks of the
# pinned npm package js-tiktoken (tests/e2e's dependencies): no download
# from the hub, nothing committed but the script.
# Without node or the npm registry test_tok reports the part skipped.
$(BUILD)/vocab/gpt-oss-o200k.gguf: scripts/o200k_vocab.mjs tests/e2e/package-lock.json
	@mkdir -p $(dir $@)
	@{ [ -d tests/e2e/node_modules/js-tiktoken ] || (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error); } && \
	  node scripts/o200k_vocab.mjs $@ || echo "gpt-oss vocabulary not written (node or npm failed): test_tok skips it"

# The pre-tokenizer oracle's regex module (tests/pretok), pinned, in the same venv.
$(BUILD)/venv/.pretok: tests/pretok/requirements.txt $(BUILD)/venv/.installed
	$(BUILD)/venv/bin/pip install -q --disable-pip-version-check -r tests/pretok/requirements.txt
	@touch $@

# The KV events test's subscriber (pyzmq, msgpack), pinned, in the same venv.
$(BUILD)/venv/.kv_events: tests/kv_events/requirements.txt $(BUILD)/venv/.installed
	$(BUILD)/venv/bin/pip install -q --disable-pip-version-check -r tests/kv_events/requirements.txt
	@touch $@

# A part's time limit (tests/run.sh, 600 s) is raised for the sanitized
# runs: on a 2-core VM the e2e suite under ASan ran 409 s and past 600 s
# (its JSON Schema tests 5x their plain time).
test-asan: deps
	$(MAKE) BUILD=build-asan OPT="-O1 -g -DPK_DEBUG -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" all tests-only build-asan/venv/.installed build-asan/venv/.jinja build-asan/venv/.pretok build-asan/venv/.kv_events build-asan/vocab/gpt-oss-o200k.gguf
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TEST_TIMEOUT=1500 sh tests/run.sh build-asan

# ThreadSanitizer over the same suite (C tests, e2e against the TSan
# binary, the Python package's live tests).  Reports abort the process
# (halt_on_error), so a race fails the test it happens in.
test-tsan: deps
	$(MAKE) BUILD=build-tsan OPT="-O1 -g -DPK_DEBUG -fsanitize=thread -fno-omit-frame-pointer" all tests-only build-tsan/venv/.installed build-tsan/venv/.jinja build-tsan/venv/.pretok build-tsan/venv/.kv_events build-tsan/vocab/gpt-oss-o200k.gguf
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  TEST_TIMEOUT=3600 sh tests/run.sh build-tsan

# Fault injection (tests/test_fault.c): the N-th allocation fails, N = 1 ..
# all, over scripted workloads; the linker's --wrap sends the project's
# allocations through tests/fault.c, and tests/fault_send.c interposes on
# MHD's send, sendmsg, write and sendfile64 to fail the N-th send (the send
# and router areas; the router's child is build-fault/polykv).  Under ASan +
# LSan, so a failure path that leaks fails too.
FAULT_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=aligned_alloc,--wrap=posix_memalign \
              -Wl,--wrap=json_loadb,--wrap=json_loads
$(BUILD)/tests/test_fault: $(BUILD)/obj/tests/test_fault.o $(BUILD)/obj/tests/fault.o $(BUILD)/obj/tests/fault_send.o \
                            $(BUILD)/libpolykv.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(FAULT_WRAP) -o $@ $^ $(LDLIBS)
test-fault: deps
	$(MAKE) BUILD=build-fault OPT="-O1 -g -DPK_DEBUG -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" build-fault/tests/test_fault build-fault/polykv
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 POLYKV_CHECK=1 FAULT_POLYKV=build-fault/polykv build-fault/tests/test_fault

tests-only: $(TESTS)

bench: deps all $(BENCHES) $(BUILD)/venv/.kv_events
	@sh bench/run.sh $(BUILD)

fuzz: deps
	@sh fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf build build-asan build-tsan build-fault build-fuzz

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_SRC:%.c=$(BUILD)/obj/%.d) $(BUILD)/obj/tests/test_fault.d $(BUILD)/obj/tests/fault.d $(BUILD)/obj/tests/fault_send.d $(BENCH_SRC:%.c=$(BUILD)/obj/%.d)
.SECONDARY:
