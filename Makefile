VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all lint bench lock clean runtime-llama

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
		safetensors tokenizers sympy numpy gguf
	touch $(LLAMA_STAMP)

runtime-llama: $(LLAMA_STAMP)
	PYTHONPATH=. $(LLAMA_PY) scripts/runtimes/check_llamacpp.py
