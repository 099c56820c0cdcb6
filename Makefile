VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all lint bench lock clean

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
