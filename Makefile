# Two commands for a fresh clone: `make demo` and `make test`. Everything else is optional.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
REAL   := .venv-real
# Extra package index for torch's CPU wheel, e.g. https://download.pytorch.org/whl/cpu on a
# machine without the local wheel (empty: pip's own configuration decides).
TORCH_INDEX ?=

.PHONY: demo test lint typecheck unit system shells bench test-real test-matrix test-matrix-full dist test-dist test-rules test-html test-fleet test-slurm test-container docs-images clean

# The stamp is rebuilt when the project metadata changes, so a stale venv never hides a new dependency.
# `examples`: NumPy, which the README's tour runs (tests/project/test_readme.py runs it here).
$(VENV)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,examples]'
	touch $@

demo: $(VENV)/.stamp
	$(BIN)/python -m oversub.cli.demo

lint: $(VENV)/.stamp
	$(BIN)/ruff check oversub tests bench examples tools
	$(BIN)/ruff format --check oversub tests bench examples tools

typecheck: $(VENV)/.stamp
	$(BIN)/mypy

# Two runs. `unit`: every test not marked `integration`, on every usable vCPU
# (pytest-xdist). `system`: the `integration` tests, which start real process trees and
# judge what they do, one at a time: another test beside one would be load it did not start.
unit: $(VENV)/.stamp
	$(BIN)/pytest -q -n auto -m 'not integration and not real and not html'

system: $(VENV)/.stamp
	$(BIN)/pytest -q -m 'integration and not real and not html'

test: shells lint typecheck unit system

# The shells the completion tests drive, tmux for the terminal tests (they read the screen
# back with capture-pane) and strace for the signal tests (it delivers a signal at the exact
# moment a fork returns), fusermount3 for the FUSE server of the memory-read tests (it mounts
# for an unprivileged user): installed with apt-get where root can; a missing one is named here
# and its test skips saying so (OVERSUB_NO_INSTALL=1: name, never install).
shells:
	@$(PYTHON) tools/syspkg.py --for "make test" bash=bash zsh=zsh fish=fish tmux=tmux strace=strace fusermount3=fuse3

# ps and pidstat are the bench's comparison rows: installed where they can be, named if not.
bench: $(VENV)/.stamp
	@$(PYTHON) tools/syspkg.py --for "make bench" ps=procps pidstat=sysstat
	$(BIN)/python bench/run.py

# The Prometheus rules and the exporter's example scrape (docs/metrics.md), checked by the
# real promtool: `check rules` (syntax, PromQL), `test rules` (each alert firing and not
# firing), `check metrics` (Prometheus's naming lint). promtool comes with Debian's
# `prometheus` package (which also installs the server; on a systemd machine it enables
# prometheus.service). Where it cannot be installed (not root, no apt-get,
# OVERSUB_NO_INSTALL=1) the target says so and skips; an install that could run but failed
# fails the target.
test-rules:
	@$(PYTHON) tools/syspkg.py --for "make test-rules" --require promtool=prometheus
	@if ! command -v promtool >/dev/null 2>&1; then \
		echo "make test-rules: skipped: promtool is not installed (see above)"; \
	else \
		set -e; \
		promtool --version 2>&1 | head -n 1; \
		promtool check rules deploy/prometheus/oversub.rules.yml; \
		promtool test rules deploy/prometheus/oversub.rules.test.yml; \
		promtool check metrics < docs/metrics.example.prom; \
		echo "make test-rules: docs/metrics.example.prom: SUCCESS (promtool check metrics)"; \
	fi

# `oversub report --format html` in a real browser: Debian's chromium (installed here where
# root can; skipped, saying why, where it cannot) renders the report of a real oversubscribed
# run headless; the tests check the screenshot's pixels for each chart and that the page
# makes no request, even when recorded names are HTML that would load something.
test-html: $(VENV)/.stamp
	@$(PYTHON) tools/syspkg.py --for "make test-html" --require chromium=chromium
	$(BIN)/pytest -q -m html tests/unit/recording/test_report_html.py

# docs/watch.png, the README's picture of the live view: a real `oversub watch` of
# `oversub stress --procs 4 --threads 2` in a tmux pane, read back with its colours, drawn by
# rich as SVG and by headless Chromium as PNG (tools/docs_images.py). tmux and chromium are
# installed like test-html's. It judges real CPU use: on a shared machine, run it alone.
docs-images: $(VENV)/.stamp
	@$(PYTHON) tools/syspkg.py --for "make docs-images" --require tmux=tmux chromium=chromium
	$(BIN)/python tools/docs_images.py

# A real Prometheus server (Debian's `prometheus` package, installed here where root can)
# scrapes `oversub serve --cgroup` watching an oversubscribed `oversub stress` tree in a cgroup
# with a CPU quota, then a healthy one, and its HTTP query API must show the right verdict and
# demand; the repository's rule file is loaded by the real server. After test-rules (promtool).
# Then the same through node_exporter's textfile collector (Debian's prometheus-node-exporter).
# Skips, saying why, where it cannot run (not root, no cgroup cpu controller to write).
test-fleet: $(VENV)/.stamp test-rules
	@$(PYTHON) tools/syspkg.py --for "make test-fleet" --require prometheus=prometheus prometheus-node-exporter=prometheus-node-exporter
	$(BIN)/python tools/fleet_check.py

# oversub inside a real one-node SLURM cluster started here (Debian's slurm-wlm and munge,
# installed where root can): budgets of job steps, `--procs auto`, and docs/clusters.md's
# batch and torchrun recipes run as written (sbatch, srun, merge), then every daemon is
# stopped and its state removed. The torchrun part uses the real-library venv's torch.
# Skips, saying why, where it cannot run (not root, no apt-get).
test-slurm: $(VENV)/.stamp $(REAL)/.stamp
	@$(PYTHON) tools/syspkg.py --for "make test-slurm" --require slurmctld=slurm-wlm slurmd=slurm-wlm srun=slurm-wlm munged=munge pgrep=procps
	$(BIN)/python tools/slurm_check.py

# oversub inside a real container engine: Debian's podman (with runc: crun refuses a hybrid
# cgroup v1 + v2 host; both installed here where root can) runs .venv-real's libraries in a
# root filesystem assembled under build/container-rootfs (no registry, kept for the next
# run), with `--cpus 1.5` and with `--cpuset-cpus 0`: `oversub cpus` says N = 1, each
# runtime starts there the threads `doctor` reports inside and predicted on the host, and
# `oversub run` takes a NumPy and a torch process from oversubscribed to sized
# (tools/container_check.py, about 2-3 min). Skips, saying why, where it cannot run (not
# root, no podman, one CPU, a podman that cannot start a container).
test-container: $(VENV)/.stamp $(REAL)/.stamp
	@$(PYTHON) tools/syspkg.py --for "make test-container" --require podman=podman runc=runc
	$(BIN)/python tools/container_check.py

# The unit tests (on every usable vCPU, as `make unit`) on every Python that pyproject's
# classifiers list and this machine has, each in its own .venv-matrix/3.X; it says which ran and which are missing, and why. The
# integration tests judge real CPU use and take minutes per version: `make test` runs them on
# the main interpreter, `make test-matrix-full` on every version (MATRIX_ARGS= does the same).
# MATRIX_PYTHONS="3.10 3.13" picks versions; MATRIX_ARGS go to pytest.
MATRIX_PYTHONS ?=
MATRIX_ARGS ?= -n auto -m 'not integration and not real'
test-matrix: shells
	MATRIX_PYTHONS="$(MATRIX_PYTHONS)" $(PYTHON) tools/matrix.py $(if $(MATRIX_ARGS),-- $(MATRIX_ARGS))

test-matrix-full:
	$(MAKE) test-matrix MATRIX_ARGS=

# sdist and wheel into dist/, as a release builds them.
dist: $(VENV)/.stamp
	$(BIN)/python -m build --outdir dist .

# Build from the tracked files, install with pip (wheel, sdist) and pipx, run `oversub`.
test-dist: $(VENV)/.stamp
	$(BIN)/python tools/dist_check.py

# torch's CPU wheel: on this kind of machine pip takes it from a local file (docs/workloads.md);
# elsewhere: make test-real TORCH_INDEX=https://download.pytorch.org/whl/cpu
# scikit-learn (joblib/loky) and dask[distributed] are the libraries whose worker processes
# the rules must get right (thread variables they set, task threads they run).
# polars, pyarrow, numexpr, numba, onnxruntime (with onnx to build a tiny model) run pools of
# their own, each with its own knob (docs/pools.md, "Runtimes and their knobs").
# tokenizers, opencv-python-headless, xgboost-cpu (the small CPU-only wheel), lightgbm and
# faiss-cpu are issue 41's libraries (docs/pools.md, "More libraries' pools"): about 12 s
# more from a warm wheel cache. The list lives here, so a change to this file brings an
# existing venv up to date (about 5 s when nothing is missing).
$(REAL)/.stamp: pyproject.toml Makefile
	$(PYTHON) -m venv $(REAL)
	$(REAL)/bin/python -m pip install --quiet --upgrade pip
	$(REAL)/bin/python -m pip install --quiet $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) \
		-e '.[dev]' 'torch==2.13.0' numpy threadpoolctl scikit-learn 'dask[distributed]' \
		polars pyarrow numexpr numba onnxruntime onnx \
		tokenizers opencv-python-headless xgboost-cpu lightgbm faiss-cpu
	touch $@

test-real: $(REAL)/.stamp
	$(REAL)/bin/pytest -q -m real -p no:cacheprovider tests/system/real

clean:
	rm -rf $(VENV) $(REAL) .venv-matrix build dist *.egg-info
