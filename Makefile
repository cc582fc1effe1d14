# LLaMA from the Inside -- the two commands are `make book` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed-stamp
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with nbval-sanitize.cfg -p no:cacheprovider

.PHONY: help install install-cuda book lab test test-unit test-package test-notebooks test-book \
        exercises grade autograder student-release lock clean

help:
	@echo "make book        build the HTML book into _build/html (creates .venv if missing)"
	@echo "make test        the whole suite: unit, graded, stubs, grader, notebooks, book build"
	@echo "make lab         JupyterLab on book/ with the course kernel registered"
	@echo "make exercises   regenerate exercises/ from solutions/"
	@echo "make grade       grade exercises/ (python -m llama_course.grade exercises/)"
	@echo "make autograder  build the Gradescope autograder zip into _build/"
	@echo "make student-release  dist/llama-course-student.tar.gz without solutions/"
	@echo "make install-cuda  replace the CPU build of torch with PyPI's CUDA build"

# torch first, on its own and pinned, so a CPU machine never pulls a multi-GB CUDA build;
# then the exact pins of requirements.lock (which 2.13.0 already satisfies), then the package.
$(STAMP): requirements.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) $(TORCH)
	$(PIP) -r requirements.lock
	$(PIP) --no-deps --no-build-isolation -e .
	touch $@

install: $(STAMP)

install-cuda: install
	$(PIP) --force-reinstall -c requirements.lock $(TORCH) --index-url https://pypi.org/simple

book: install
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "Open file://$(CURDIR)/_build/html/index.html"

# JupyterLab with this environment registered as the "LLaMA from the Inside" kernel.
lab: install
	$(PY) -m ipykernel install --user --name llama-course --display-name "LLaMA from the Inside"
	$(VENV)/bin/jupyter lab book/

test: install test-unit test-package test-notebooks test-book test-site-if-browser
	@echo "make test: all checks passed"

# Package unit tests; graded tests against solutions/ (must score 100%); exercises/ in sync
# with solutions/; the grader end to end (solutions full marks, stubs 0, hostile code isolated).
test-unit: install
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist load tests --impl=solutions
	$(PY) -m llama_course.grade.stubs --check

# The same graded tests against the package's reference implementation.
test-package: install
	$(PY) -m pytest -p no:cacheprovider -q tests/graded --impl=package

test-notebooks: install
	$(PY) -m pytest $(NBVAL) -n 2 --dist loadscope book

test-book: install
	rm -rf _build/html _build/.doctrees
	$(VENV)/bin/jupyter-book build . -W -n --keep-going --all

# Browser checks of the built site (site_tests/): every page over HTTP and file://, math
# typeset, images loaded, no JavaScript errors, no request leaving the machine, offline search;
# screenshots in _build/screenshots/. Drives the system Chromium ($CHROMIUM, else chromium).
.PHONY: test-site test-site-if-browser
test-site: install
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	$(PY) -m pytest -p no:cacheprovider site_tests -q

# In `make test`: test-book has just built _build/html, so no rebuild here.
test-site-if-browser: install
	@if command -v "$${CHROMIUM:-chromium}" >/dev/null 2>&1; then \
	  $(PY) -m pytest -p no:cacheprovider site_tests -q; \
	else \
	  echo "Chromium is not installed: skipping the browser checks of the site (apt-get install chromium to run them)"; \
	fi

# The style is the linter's (configured in pyproject.toml).
.PHONY: lint
lint: install
	$(VENV)/bin/ruff check .

exercises: install
	$(PY) -m llama_course.grade.stubs solutions exercises

grade: install
	$(PY) -m llama_course.grade exercises

autograder: install
	$(PY) -m llama_course.grade.autograder --out _build/autograder.zip

# The committed tree without the instructor's key.
student-release:
	mkdir -p dist
	git archive --format=tar.gz --prefix=llama-course/ -o dist/llama-course-student.tar.gz HEAD -- . ':(exclude)solutions'
	@echo "wrote dist/llama-course-student.tar.gz (no solutions/)"

lock:
	$(PY) -m pip freeze --all --exclude-editable | grep -v -E '^(torch|pip)==' | \
	  { echo "# Exact pins for the course environment (pip freeze, torch excluded: the Makefile"; \
	    echo "# installs $(TORCH) first, on its own). Regenerate with: make lock"; cat; } > requirements.lock

clean:
	rm -rf _build .pytest_cache
