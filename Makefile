# GridGraph: `make demo` and `make test` set everything up on a fresh Debian 12
# machine (run as root, or with sudo available for the apt step).
SHELL := /bin/bash
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
DEBIAN_PACKAGES := qgis python3-qgis qgis-plugin-grass gdal-bin python3-gdal python3-venv
QGIS_PROFILE := $(HOME)/.local/share/QGIS/QGIS3/profiles/default
export QT_QPA_PLATFORM ?= offscreen
PYTEST_ARGS ?=

.PHONY: setup system-packages venv link demo test test-cudasim bench clean

setup: system-packages venv link

system-packages:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends $$missing; \
	fi

# Debian's numpy must stay: QGIS and GDAL's bindings are built against it.
$(VENV)/.installed: requirements.txt requirements-dev.txt
	test -x $(PY) || /usr/bin/python3 -m venv --system-site-packages $(VENV)
	/usr/bin/python3 -c 'import numpy; print("numpy==" + numpy.__version__)' > $(VENV)/constraints.txt
	$(PY) -m pip install -q --disable-pip-version-check -c $(VENV)/constraints.txt -r requirements-dev.txt
	$(PY) -c 'import numpy, numba, qgis.core, osgeo.gdal; print("venv ready: numpy", numpy.__version__, "numba", numba.__version__)'
	touch $@

venv: system-packages $(VENV)/.installed

# `import gridgraph` in .venv, and the checkout as QGIS plugin `gridgraph`.
link: venv
	mkdir -p $(VENV)/gridgraph-path
	ln -sfn $(ROOT) $(VENV)/gridgraph-path/gridgraph
	echo $(VENV)/gridgraph-path > $$($(PY) -c 'import site; print(site.getsitepackages()[0])')/gridgraph.pth
	mkdir -p $(QGIS_PROFILE)/python/plugins
	ln -sfn $(ROOT) $(QGIS_PROFILE)/python/plugins/gridgraph
	$(PY) -m gridgraph.core.warmup  # compile the kernels now, not on a first run
	$(ROOT)/scripts/qgis-process plugins enable gridgraph >/dev/null 2>&1 || true
	$(ROOT)/scripts/qgis-process plugins enable grassprovider >/dev/null 2>&1 || true
	@$(ROOT)/scripts/qgis-process plugins 2>/dev/null | grep -q '\* gridgraph' || \
	  { echo "qgis_process does not load the gridgraph plugin: run '$(ROOT)/scripts/qgis-process plugins enable gridgraph' to see why"; exit 1; }

demo: setup
	$(PY) scripts/demo.py --output $(ROOT)/demo-output

# The Dask tests run in a process of their own, which keeps the local
# cluster's threads and processes apart from QGIS's shutdown at the end of
# the main suite (a crash at exit there fails `make test` after every test
# passed).  The main suite and the CUDA simulator's run in one test process
# per core, at most 4 (pytest-xdist; `make test PYTEST_WORKERS=0` for one,
# as --pdb needs):
# on a fresh clone most of the main suite's time is numba compiling kernels
# into its on-disk cache, one core per process, and the simulator runs every
# GPU thread in Python.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 2 ? 0 : n < 4 ? n : 4 )))
PYTEST_PARALLEL = -n $(PYTEST_WORKERS) --dist worksteal
test: setup
	$(PY) -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS) --ignore=tests/cuda --ignore=tests/distributed tests
	$(PY) -m pytest $(PYTEST_ARGS) tests/distributed
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS) tests/cuda

# The benchmark peers install here, never in the test set-up; numpy stays
# Debian's (the venv's constraints file).
$(VENV)/.bench-installed: requirements-bench.txt $(VENV)/.installed
	$(PY) -m pip install -q --disable-pip-version-check -c $(VENV)/constraints.txt -r requirements-bench.txt
	touch $@

bench: setup $(VENV)/.bench-installed
	$(PY) bench/cpu.py

clean:
	rm -rf $(VENV) demo-output .pytest_cache .hypothesis
