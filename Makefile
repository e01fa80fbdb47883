# make              build libnvs.so for x86_64 and aarch64, for glibc 2.17 and newer
#                   (libnvs/build.mk; no CUDA toolkit needed)
# make test         every test, in a virtualenv this Makefile creates (.venv)
# make dist         a wheel per architecture in dist/, each carrying its libnvs.so
# make scheduler    build, install into .venv and run the scheduler in the foreground
# make install      library, Python package and systemd units under PREFIX (DESTDIR for staging)
# make uninstall    remove what make install put under PREFIX
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
# The Python package and its dependencies live in a private folder, away from site-packages;
# the library beside it, at $(PKGDIR)/libnvs.so, where the device plugin looks by default.
PKGDIR ?= $(LIBDIR)/gemshare
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/gemshare
BUILD ?= build
DIST ?= dist
VENV ?= .venv
CC ?= cc
# The interpreter the installed commands run on, looked up on the target when they start: by
# default the first python3 on PATH (`/usr/bin/env python3`); an absolute path pins one
# (INSTALL_PYTHON=/usr/bin/python3.11). Either way it must be the same Python version (3.X) as
# $(VENV)'s, for which the package folder is filled (some dependencies are compiled for it):
# make install refuses a pinned one of another version, and the launchers one found on PATH,
# each saying to install with a virtualenv of that Python (PYTHON= and VENV=).
INSTALL_PYTHON ?= /usr/bin/env python3
# A shebang passes one argument: `env` needs -S to split "python3 -IS".
INSTALL_BY_ENV = $(filter %/env,$(firstword $(INSTALL_PYTHON)))
LAUNCHER_INTERPRETER = $(if $(INSTALL_BY_ENV),$(firstword $(INSTALL_PYTHON)) -S $(wordlist 2,$(words $(INSTALL_PYTHON)),$(INSTALL_PYTHON)),$(INSTALL_PYTHON))
# The Python that makes $(VENV): a pinned INSTALL_PYTHON's, so that the two agree by default.
PYTHON ?= $(if $(INSTALL_BY_ENV),python3,$(firstword $(INSTALL_PYTHON)))
PYTHON_VERSION = import sys; print("%d.%d" % sys.version_info[:2])
SCHEDULER_ARGS ?=
# make scheduler keeps the settings changed with gemsharectl in the build tree rather than
# /var/lib/gemshare; it reads the scheduler's default config file unless SCHEDULER_CONFIG names
# another.
SCHEDULER_STATE_DIR ?= $(BUILD)/state
SCHEDULER_CONFIG ?=
PROGRAMS := gemshare-scheduler gemsharectl gemshare-device-plugin
# What dependencies put at the top of the package folder that is no part of what they provide:
# nvidia-ml-py's sample program would be importable as a module named `example`.
STRAY := example.py
UNITS := gemshare-scheduler.service gemshare-scheduler.socket
# Drop-ins for the service, installed with the documentation for the administrator to copy.
DROP_IN_EXAMPLES := metrics.conf.example mps.conf.example
# The README and every page it links, at the same relative paths, so the links work installed.
DOCS := README.md LICENSE CHANGELOG.md $(wildcard docs/*.md) libnvs/README.md bench/README.md
# What pip builds the package from: make install and make dist build from a copy of these.
PYTHON_SOURCES := pyproject.toml README.md LICENSE nvs ctl plugin

.PHONY: all lib fakecuda venv test dist scheduler install uninstall clean
all: libs

include libnvs/build.mk
include launcher/build.mk
include tests/fakecuda/build.mk

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	touch $@

# The tests run in parallel (pytest-xdist), two per CPU: most of their time goes to waiting for
# the processes they start. Each file's tests run on one worker, so that a fixture a module
# shares (make install, make dist, a compilation) is made once; no file is more than a few
# percent of the whole.
# What the tests need is made first, all at once: the virtualenv's downloads and the builds
# overlap.
CPUS := $(shell nproc 2>/dev/null || echo 1)
TEST_WORKERS ?= $(shell echo $$((2 * $(CPUS))))
test:
	@$(MAKE) --no-print-directory -j$(CPUS) libs fakecuda fakecuda-cross hold-signals venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) \
		--dist loadfile

# Root gets the system socket; anyone else a private one, and their own group as the control
# group so that gemsharectl may change settings. GEMSHARE_SOCKET, when set, wins. It starts
# through hold-signals, as the installed command does.
scheduler: lib venv $(HOLD_SIGNALS)
	@if [ -n "$${GEMSHARE_SOCKET:-}" ]; then sock="$$GEMSHARE_SOCKET"; group=""; \
	elif [ "$$(id -u)" = 0 ]; then sock=/var/run/gemshare/scheduler.sock; group=""; \
	else group="--control-group=$$(id -gn)"; \
	  if [ -n "$${XDG_RUNTIME_DIR:-}" ]; then sock="$$XDG_RUNTIME_DIR/gemshare/scheduler.sock"; \
	  else sock="/tmp/gemshare-$$(id -u)/scheduler.sock"; fi; \
	fi; \
	echo "gemshare-scheduler is starting on $$sock (Ctrl-C stops it). In another shell:"; \
	echo "  export GEMSHARE_SOCKET=$$sock"; \
	echo "  LD_PRELOAD=$(abspath $(BUILD))/libnvs.so python train.py"; \
	echo "  $(abspath $(VENV))/bin/gemsharectl status"; \
	exec $(HOLD_SIGNALS) $(VENV)/bin/gemshare-scheduler --socket "$$sock" $$group \
	  $(if $(SCHEDULER_CONFIG),--config "$(SCHEDULER_CONFIG)") \
	  --state-dir "$(abspath $(SCHEDULER_STATE_DIR))" $(SCHEDULER_ARGS)

# The package goes in with pip --target: unlike a virtualenv, that folder holds no absolute paths
# of its own, so it can be staged under DESTDIR and moved into place. The commands in BINDIR are
# small launchers that run the pinned interpreter isolated (-I: no PYTHONPATH or current
# directory; -S: no site-packages) on that folder; gemshare-scheduler's interpreter line goes
# through hold-signals first, so that no signal kills it while Python starts. pip builds a local
# project in place, so it gets a copy under $(BUILD) to keep build files out of the source tree
# (one of its own, so that two makes at once do not meet).
install: lib venv $(HOLD_SIGNALS)
	@built=$$($(VENV)/bin/python -c '$(PYTHON_VERSION)'); \
	if [ -z "$(INSTALL_BY_ENV)" ]; then \
	  pinned=$$($(INSTALL_PYTHON) -c '$(PYTHON_VERSION)') || exit 1; \
	  if [ "$$pinned" != "$$built" ]; then \
	    echo "make install: INSTALL_PYTHON=$(INSTALL_PYTHON) is Python $$pinned, but the package" \
	         "folder is filled from $(VENV), a Python $$built virtualenv (some dependencies are" \
	         "compiled for one version); use a virtualenv of that Python:" \
	         "make install INSTALL_PYTHON=$(INSTALL_PYTHON) PYTHON=$(INSTALL_PYTHON)" \
	         "VENV=.venv-$$pinned" >&2; \
	    exit 1; \
	  fi; \
	fi
	install -d $(DESTDIR)$(PKGDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(DOCDIR)
	install -m 0755 $(BUILD)/libnvs.so $(DESTDIR)$(PKGDIR)/libnvs.so
	install -m 0755 $(HOLD_SIGNALS) $(DESTDIR)$(PKGDIR)/hold-signals
	rm -rf $(DESTDIR)$(PKGDIR)/python
	source=$$(mktemp -d $(BUILD)/python-src.XXXXXX) && cp -R $(PYTHON_SOURCES) $$source/ && \
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-warn-script-location \
		--no-compile --target $(DESTDIR)$(PKGDIR)/python $$source && rm -rf $$source
	rm -rf $(DESTDIR)$(PKGDIR)/python/bin $(addprefix $(DESTDIR)$(PKGDIR)/python/,$(STRAY))
	@# Where a wheel carries the library, a link to it: gemsharectl library-path finds it there.
	ln -sfn ../../libnvs.so $(DESTDIR)$(PKGDIR)/python/gemshare_nvs/libnvs.so
	@# Bytecode made here names the final paths (-d), not the staging ones, in tracebacks.
	$(VENV)/bin/python -m compileall -q -d $(PKGDIR)/python $(DESTDIR)$(PKGDIR)/python
	@built=$$($(VENV)/bin/python -c 'import sys; print("%d, %d" % sys.version_info[:2])'); \
	dotted=$$($(VENV)/bin/python -c '$(PYTHON_VERSION)'); \
	for name in $(PROGRAMS); do \
	  case $$name in gemshare-scheduler) first='#!$(PKGDIR)/hold-signals $(INSTALL_PYTHON) -IS';; \
	    *) first='#!$(LAUNCHER_INTERPRETER) -IS';; esac; \
	  printf '%s\n' "$$first" \
	    "# $$name, installed by gemshare's make install; runs from $(PKGDIR)/python." \
	    'import sys' \
	    "if sys.version_info[:2] != ($$built):" \
	    "    here = '%d.%d' % sys.version_info[:2]" \
	    "    sys.exit(f\"$$name: installed for Python $$dotted, but {sys.executable} is \"" \
	    "             f\"{here}; install it for that Python with a virtualenv of it: make \"" \
	    "             f\"install INSTALL_PYTHON={sys.executable} PYTHON={sys.executable} \"" \
	    "             f\"VENV=.venv-{here}\")" \
	    'sys.path.insert(0, "$(PKGDIR)/python")' \
	    'from importlib.metadata import entry_points' \
	    "(entry,) = entry_points(group=\"console_scripts\", name=\"$$name\")" \
	    'sys.exit(entry.load()())' > $(DESTDIR)$(BINDIR)/$$name && \
	  chmod 0755 $(DESTDIR)$(BINDIR)/$$name && echo "installed $(DESTDIR)$(BINDIR)/$$name"; \
	done
	@for unit in $(UNITS); do \
	  sed -e 's|^ExecStart=/usr/local/bin/gemshare-scheduler|ExecStart=$(BINDIR)/gemshare-scheduler|' \
	      -e 's|file:///usr/local/share/doc/gemshare/|file://$(DOCDIR)/|' \
	    systemd/$$unit > $(DESTDIR)$(SYSTEMDUNITDIR)/$$unit && \
	  chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$$unit && echo "installed $(DESTDIR)$(SYSTEMDUNITDIR)/$$unit"; \
	done
	@for doc in $(DOCS); do install -D -m 0644 $$doc $(DESTDIR)$(DOCDIR)/$$doc; done
	@for example in $(DROP_IN_EXAMPLES); do \
	  sed -e 's|^ExecStart=/usr/local/bin/gemshare-scheduler|ExecStart=$(BINDIR)/gemshare-scheduler|' \
	    systemd/gemshare-scheduler.service.d/$$example > $(DESTDIR)$(DOCDIR)/$$example && \
	  echo "installed $(DESTDIR)$(DOCDIR)/$$example"; \
	done

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(PROGRAMS))
	rm -f $(addprefix $(DESTDIR)$(SYSTEMDUNITDIR)/,$(UNITS))
	rm -rf $(DESTDIR)$(PKGDIR) $(DESTDIR)$(DOCDIR)

clean:
	rm -rf $(BUILD) $(DIST)

# Each wheel is the package built by pip from a copy of the sources, as for make install, with
# that architecture's library inside it, tagged for the glibc the library needs
# (manylinux_2_17_ARCH): nothing else in it depends on the machine.
MANYLINUX := manylinux_$(subst .,_,$(GLIBC_FLOOR))
dist: venv $(LIBNVS_ARCHES:%=$(BUILD)/%/libnvs.so)
	@for arch in $(LIBNVS_ARCHES); do \
	  source=$$(mktemp -d $(BUILD)/dist-src.XXXXXX) && cp -R $(PYTHON_SOURCES) $$source/ && \
	  cp $(BUILD)/$$arch/libnvs.so $$source/nvs/libnvs.so && \
	  $(VENV)/bin/python -m pip wheel -q --disable-pip-version-check --no-deps -w $(DIST) \
	    --config-settings=--build-option=--plat-name=$(MANYLINUX)_$$arch $$source && \
	  rm -rf $$source || exit 1; \
	done
	@ls $(DIST)/*-$(MANYLINUX)_*.whl

# make bench-cpu   benchmarks on the fake driver, no GPU needed: lock handoff, launch overhead,
#                  scheduler scale, a pair with idle gaps (bench/README.md); BENCH_JSON=path also
#                  writes the results
# make bench-soak  a long run compressed into minutes (BENCH_SOAK_SECONDS, default 180): the
#                  scheduler's memory, descriptors and handoff latency before and after
# make bench-abuse what one unprivileged local user (uid 65534 when run as root) can take from
#                  the others: control connections, the log, metrics, reloads, start-up
# make bench-gpu   the same layer on a real GPU; BENCH_PYTHON is the Python with PyTorch
BENCH_PYTHON ?= python3
.PHONY: bench-cpu bench-soak bench-abuse bench-gpu
bench-cpu: lib fakecuda venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) $(VENV)/bin/python bench/run_cpu.py

bench-soak: lib fakecuda venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) $(VENV)/bin/python bench/soak.py

bench-abuse: lib fakecuda hold-signals venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) $(VENV)/bin/python bench/abuse.py

bench-gpu: lib venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) BENCH_PYTHON=$(BENCH_PYTHON) \
		$(VENV)/bin/python bench/run_gpu.py
