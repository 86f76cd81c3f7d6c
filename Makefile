# blrgraph: `make demo` and `make test` work from a fresh clone (they create .venv).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test bench clean

$(VENV)/bin/activate:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

$(VENV)/.demo: $(VENV)/bin/activate setup.cfg
	$(PIP) install -e '.[all]'
	touch $@

$(VENV)/.test: $(VENV)/bin/activate setup.cfg
	$(PIP) install -e '.[test]'
	touch $@

demo: $(VENV)/.demo
	$(VENV)/bin/blrgraph demo --out demo-output
	@echo
	@echo "blrgraph is installed in $(VENV). To use the blrgraph command (and import blrgraph):"
	@echo "    source $(VENV)/bin/activate"
	@echo "or call $(VENV)/bin/blrgraph and $(VENV)/bin/python directly."

test: $(VENV)/.test
	$(PY) -m pytest -q -n 2 tests

bench: $(VENV)/.test
	$(PY) benchmarks/bench_gmm.py --quick
	$(PY) benchmarks/bench_lda.py --quick
	$(PY) benchmarks/bench_streaming.py --quick
	$(PY) benchmarks/bench_hmm.py --quick

clean:
	rm -rf $(VENV) demo-output build *.egg-info
