# make            build libnvs.so (gcc alone; no CUDA toolkit needed)
# make test       every test, in a virtualenv this Makefile creates
# make install    library, Python package and systemd units under PREFIX
PREFIX ?= /usr/local
BUILD ?= build
VENV ?= .venv
PYTHON ?= python3
CC ?= cc

.PHONY: all lib fakecuda venv test clean
all: lib

include libnvs/build.mk
include tests/fakecuda/build.mk

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	touch $@

test: lib fakecuda venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) $(VENV)/bin/python -m pytest

clean:
	rm -rf $(BUILD)
