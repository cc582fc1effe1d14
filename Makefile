# LLaMA from the Inside -- the two commands are `make book` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
# The PyTorch build `make install` puts in .venv (tools/install_torch.sh, the one place that
# installs torch): auto = PyPI's CUDA build on Linux when `nvidia-smi -L` lists a GPU, else the
# CPU build from PyTorch's own index (on macOS, PyPI's build: CPU and MPS); or cpu, or cuda.
TORCH ?= auto
# The oldest Python the pins of requirements.lock install on (tests/e2e/test_install.py checks it).
PYTHON_FLOOR := 3.11.5
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with nbval-sanitize.cfg -p no:cacheprovider
# The instructor's tree grades graded tests against its key; a student release has no key and
# checks them against the package instead.
IMPL := $(if $(wildcard solutions/*.py),solutions,package)
CHAPTER ?=

.PHONY: help install install-cuda book lab lint gpu-check check test test-unit test-package test-notebooks test-book \
        test-site test-site-if-browser book-zh translations grade capstone clean exercises autograder student-release colab-cells lock

help::
	@echo "make install     create .venv with the pinned environment (TORCH=auto|cpu|cuda, see README.md)"
	@echo "make book        build the HTML book into _build/html"
	@echo "make book-zh     build the Chinese edition into _build/html/zh (in progress)"
	@echo "make translations  refresh locale/zh_CN's catalogues and list what is left to translate"
	@echo "make lab         JupyterLab on book/ with the course kernel registered"
	@echo "make grade       grade your exercises/ (CHAPTER=4 for one chapter)"
	@echo "make capstone    Chapter 14: assemble your exercises/ into a LLaMA and grade it (PARTS=ab for some)"
	@echo "make test        the whole suite: lint, unit, graded, notebooks, book build, site"
	@echo "make check       the quick check (about a minute): lint and the tests not marked slow"
	@echo "make install-cuda  replace torch in .venv with PyPI's CUDA build (Linux)"

# torch first, on its own (tools/install_torch.sh), so a machine without a GPU never pulls a
# multi-GB CUDA build; then the exact pins of requirements.lock, then the package itself.
$(STAMP): requirements.lock pyproject.toml tools/install_torch.sh
	@$(PYTHON) -c 'import sys; f = tuple(map(int, "$(PYTHON_FLOOR)".split("."))); sys.exit(sys.version_info[:3] < f)' || \
	  { echo "make install needs Python >= $(PYTHON_FLOOR); $(PYTHON) is $$($(PYTHON) --version 2>&1)." \
	         "Choose another with PYTHON=python3.12 make install" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	bash tools/install_torch.sh $(PY) $(TORCH)
	$(PIP) -r requirements.lock
	$(PIP) --no-deps --no-build-isolation -e .
	touch $@

install: $(STAMP)

# Replaces whatever torch .venv has with PyPI's CUDA build, and checks that it got it.
install-cuda: install
	bash tools/install_torch.sh $(PY) cuda

book: install
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "Open file://$(CURDIR)/_build/html/index.html"

# The Chinese edition (issue 38; not yet complete): the same pages with the translations of
# locale/zh_CN, into _build/html/zh. `make translations` refreshes the catalogues after an English
# edit and lists what is left to translate (CONTRIBUTING.md, "Translations").
book-zh: install
	$(PY) tools/build_book.py --language zh_CN -W -n --keep-going
	@echo "Open file://$(CURDIR)/_build/html/zh/index.html"

translations: install
	$(PY) tools/translations.py update
	$(PY) tools/translations.py check

# JupyterLab with this environment registered as the "LLaMA from the Inside" kernel.
lab: install
	$(PY) -m ipykernel install --user --name llama-course --display-name "LLaMA from the Inside"
	$(VENV)/bin/jupyter lab book/

# The style is the linter's (configured in pyproject.toml).
lint: install
	$(VENV)/bin/ruff check .

# The notebooks (nbval, on both CPUs) and the book build share no state (the build reads the committed
# outputs, nbval writes nothing under book/ or _build/), so they run side by side: the build, one core
# of Sphinx, fills the gaps nbval's kernels leave. -Otarget prints each one's output whole when it ends.
test: lint test-unit test-package
	$(MAKE) --no-print-directory -j2 -Otarget test-notebooks test-book
	$(MAKE) --no-print-directory test-site-if-browser
	@echo "make test: all checks passed"

# The quick check before a commit: lint and every test of tests/ that test-unit runs (unit and
# parity, book lints, graded tests against the key) except those marked slow (pyproject.toml).
check: lint
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist loadscope -m "not slow" tests --impl=$(IMPL)

# Every test of tests/, the slow ones too: package unit tests (tests/unit), book lints (tests/book),
# graded tests against the key (must score 100%); in the instructor's tree, exercises/ in sync with
# solutions/, the grader end to end, the release and the install (tests/e2e).
test-unit: install
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist loadscope tests --impl=$(IMPL)
	$(if $(wildcard solutions/*.py),$(PY) -m llama_course.grade.stubs --check)

# The same graded tests against the package's reference implementation.
test-package: install
	$(PY) -m pytest -p no:cacheprovider -q tests/graded --impl=package

# Twice: on this CPU's own kernels, then as another CPU would run them (PyTorch's kernels without
# vector instructions, MKL limited to AVX2), so outputs that only one CPU reproduces fail here.
# Machine-dependent floats are compared within the tolerance their cell declares (book/conftest.py).
# CHAPTER=10 re-runs one notebook.
NOTEBOOKS = $(if $(CHAPTER),$(foreach c,$(CHAPTER),$(wildcard book/ch$(shell printf %02d $(c))_*.ipynb)),book)

test-notebooks: install
	@test -n "$(strip $(NOTEBOOKS))" || { echo "no notebook for CHAPTER=$(CHAPTER) (book/chNN_*.ipynb)" >&2; exit 1; }
	$(PY) -m pytest $(NBVAL) -n 2 --dist loadscope $(NOTEBOOKS)
	ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=AVX2 $(PY) -m pytest $(NBVAL) -n 2 --dist loadscope $(NOTEBOOKS)

test-book: install
	rm -rf _build/html _build/.doctrees
	$(VENV)/bin/jupyter-book build . -W -n --keep-going --all

# Browser checks of the built site (site_tests/): every page over HTTP and file://, math
# typeset, images loaded, no JavaScript errors, no request leaving the machine, offline search;
# screenshots in _build/screenshots/. Drives the system Chromium ($CHROMIUM, else chromium).
test-site: install
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist loadgroup site_tests -q

# In `make test`: test-book has just built _build/html, so no rebuild here.
test-site-if-browser: install
	@if command -v "$${CHROMIUM:-chromium}" >/dev/null 2>&1; then \
	  $(PY) -m pytest -p no:cacheprovider -n 2 --dist loadgroup site_tests -q; \
	else \
	  echo "Chromium is not installed: skipping the browser checks of the site (apt-get install chromium to run them)"; \
	fi

# Grades exercises/ (reads them only; writes results.json).
grade: install
	$(PY) -m llama_course.grade exercises $(foreach c,$(CHAPTER),--chapter $(c))

# Chapter 14's capstone: a LLaMA made of exercises/ alone (the command's default folder), graded against
# transformers and the package.
PARTS ?= abcd
capstone: install
	mkdir -p _build && $(PY) -m llama_course.grade capstone --parts $(PARTS) --plot _build/capstone_curves.png

# One prepared run on a CUDA machine (benchmarks/gpu_check.py): JSON and log in benchmarks/results/.
gpu-check:
	$(PYTHON) benchmarks/gpu_check.py --device cuda

clean:
	rm -rf _build .pytest_cache

# BEGIN INSTRUCTOR (make student-release leaves everything up to END INSTRUCTOR out)
CHAPTERS ?=

help::
	@echo "make exercises   regenerate exercises/ from solutions/ (never overwrites an edited file)"
	@echo "make autograder  the Gradescope zip (CHAPTERS=\"4 5\" for one assignment; CAPSTONE=1: the capstone) in _build/"
	@echo "make student-release REPO=URL  dist/llama-course-student.tar.gz: the students' repository at URL"
	@echo "make colab-cells rewrite every notebook's Colab install cell from _config.yml"
	@echo "make lock        re-pin requirements.lock and requirements-grade.txt from .venv"

exercises: install
	$(PY) -m llama_course.grade.stubs solutions exercises

autograder: install
	$(PY) -m llama_course.grade.autograder $(foreach c,$(CHAPTERS),--chapter $(c)) $(if $(CAPSTONE),--capstone)

# The students' repository (REPO=its https URL: the release's book, notebooks and clone line point there):
# no key, no hidden tests, no instructor-only files, a git history of one commit on main (tools/student_release.py).
student-release: install
	$(PY) tools/student_release.py --repository "$(REPO)" --out dist/llama-course-student.tar.gz

colab-cells: install
	$(PY) tools/colab_cells.py

lock:
	$(PY) -m pip freeze --all --exclude-editable | grep -v -E '^(torch|pip)==' | \
	  { echo "# Exact pins for the course environment (pip freeze, torch excluded: tools/install_torch.sh"; \
	    echo "# installs it first, on its own). Regenerate with: make lock"; cat; } > requirements.lock
	$(PY) -m llama_course.grade.autograder --requirements > requirements-grade.txt
# END INSTRUCTOR
