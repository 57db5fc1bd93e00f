# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
JOB ?= jobs/stsb_indomain_bm25.yaml
ARGS ?=
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install run test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

# torch is installed first and pinned: a looser pin pulls several GB of CUDA wheels.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[cpu,test]"
	touch $@

install: $(VENV)/.installed

run: install
	$(BIN)/augsbert run $(JOB) $(ARGS)

test: install
	$(BIN)/python -m pytest tests -q --durations=15  # the slowest tests, to keep CI short

clean:
	rm -rf $(VENV) runs .pytest_cache
