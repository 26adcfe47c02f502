# inaemu: the two commands a new machine needs are `make demo` and `make test`.
# Both create .venv (Python 3.11) and install what they need on first use.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0
# p4c and bmv2 from ../shared/p4-toolchain/install.sh live here; with them the bmv2 tests run
export PATH := $(if $(wildcard /opt/p4/bin),/opt/p4/bin:)$(PATH)

.PHONY: demo test lint typecheck unit bench p4 clean mininet-deps mininet

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# the CPU build of PyTorch, for the DDP hook and its test (a plain `torch` would pull CUDA)
	$(PY) -m pip install --quiet torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet -e '.[dev,sim]'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/inaemu demo

test: lint typecheck unit

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(VENV)/bin/pytest

bench: $(STAMP)
	$(PY) bench/bench_softswitch.py

p4:
	$(MAKE) -C p4

# Mininet scenarios (root; docs/mininet.md): Debian's mininet without its recommended Open
# vSwitch (the scenarios use their own switches), and tcpdump for --pcap.
#   make mininet ARGS="--topo leaf-spine:2x2x2 --switch softswitch --algo ina --bw 20"
mininet-deps:
	@if dpkg -s mininet tcpdump >/dev/null 2>&1; then echo "mininet and tcpdump are installed"; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends mininet tcpdump; \
	else echo "make mininet-deps: needs root (apt-get install mininet tcpdump)" >&2; exit 1; fi

mininet: $(STAMP) mininet-deps
	$(VENV)/bin/inaemu mininet $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info p4/build .pytest_cache .mypy_cache .ruff_cache .hypothesis
