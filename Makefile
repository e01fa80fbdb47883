# The targets, one line each (make help prints this list; each rule's comment says more):
# make              libnvs.so for x86_64 and aarch64, for glibc 2.17 and newer (libnvs/build.mk)
# make lib          libnvs.so for this machine alone (PORTABLE=0: with cc, for its glibc only)
# make test         every test, in a virtualenv this Makefile creates (.venv)
# make dist         an sdist and a wheel per architecture in dist/, debug files beside them
# make sdist        the sdist alone, in dist/: sources, build rules, units and docs
# make install      library, Python package, units and man pages under PREFIX (DESTDIR to stage)
# make uninstall    remove what make install put under PREFIX
# make scheduler    build, install into .venv (no test tools), run the scheduler in front
# make man          the commands' man pages, from their own --help, in build/man
# make fakecuda     the fake CUDA driver and programs the tests run (tests/fakecuda)
# make venv         .venv: the package, editable, with its test tools
# make test-lowest  the tests of what users see, on the lowest dependency releases allowed
# make constraints  pin the image's dependencies again (deploy/constraints.txt)
# make bench-cpu    benchmarks on the fake driver, no GPU needed (bench/README.md)
# make bench-soak   a long run compressed into minutes: memory, descriptors, handoff latency
# make bench-abuse  what one unprivileged local user can take from the others
# make bench-gpu    the scenario registry on a real GPU and its table (BENCH_SET=1|2|3: one third)
# make device-python  the packages for a GPU machine that reaches no package index
# make clean        remove build/ and dist/
# make distclean    also remove what make downloads: Zig (.tools) and the virtualenv (.venv)
# make help         this list
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
# The Python package and its dependencies live in a private folder, away from site-packages;
# the library beside it, at $(PKGDIR)/libnvs.so, where the device plugin looks by default.
PKGDIR ?= $(LIBDIR)/gemshare
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/gemshare
MANDIR ?= $(PREFIX)/share/man
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
PROGRAMS := gemshare-scheduler gemsharectl gemshare-device-plugin gemshare-dra-plugin \
	gemshare-node-identity
# What dependencies put at the top of the package folder that is no part of what they provide:
# nvidia-ml-py's sample program would be importable as a module named `example`.
STRAY := example.py
UNITS := gemshare-scheduler.service gemshare-scheduler.socket
# One page per command, made from its own Typer definition (man/manpage.py): never apart from
# its --help.
MANPAGES := $(addsuffix .1,$(PROGRAMS))
# Drop-ins for the service, installed with the documentation for the administrator to copy.
DROP_IN_EXAMPLES := metrics.conf.example mps.conf.example
# The README and every page it links, at the same relative paths, so the links work installed.
DOCS := README.md LICENSE CHANGELOG.md $(wildcard docs/*.md) libnvs/README.md bench/README.md
# What pip builds the package from: make install and make dist build from a copy of these.
PYTHON_SOURCES := pyproject.toml setup.py build_backend README.md LICENSE nvs ctl plugin dra launcher
# The sdist's: the package's and what builds the library and hold-signals, with the units,
# deploy files and docs: what make lib, make install and make dist need (MANIFEST.in says which
# of them go in). The fake driver's build rules are the tests', which it leaves out.
SDIST_SOURCES := $(PYTHON_SOURCES) MANIFEST.in Makefile ship.mk CHANGELOG.md libnvs \
                 systemd deploy docs bench/README.md man
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)

.PHONY: all lib fakecuda venv test test-lowest dist sdist scheduler install uninstall clean \
        distclean constraints help man
all: libs

include libnvs/build.mk
include launcher/build.mk
# The tests' own (the fake driver), which the sdist does not carry.
-include tests/fakecuda/build.mk
include ship.mk

# The tests and the benchmarks are a clone's: in an sdist, their targets say so and stop.
.PHONY: tests-here
tests-here:
	@$(if $(wildcard tests/fakecuda/build.mk),:,echo "make $(MAKECMDGOALS): the tests and" \
	  "benchmarks are not in this tree (an sdist carries neither); run it in a clone" >&2; exit 1)

# The package alone (make scheduler), then with its test tools (make test and the rest).
$(VENV)/.package: pyproject.toml setup.py build_backend/gemshare_backend.py
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e .
	touch $@
venv: $(VENV)/.installed
$(VENV)/.installed: $(VENV)/.package
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
test: tests-here
	@$(MAKE) --no-print-directory -j$(CPUS) libs fakecuda fakecuda-cross hold-signals venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) \
		--dist loadfile

# Root gets the system socket; anyone else a private one (the user a scheduler runs as may change
# its settings with gemsharectl). GEMSHARE_SOCKET, when set, wins. It starts through
# hold-signals, as the installed command does.
scheduler: lib $(VENV)/.package $(HOLD_SIGNALS)
	@if [ -n "$${GEMSHARE_SOCKET:-}" ]; then sock="$$GEMSHARE_SOCKET"; \
	elif [ "$$(id -u)" = 0 ]; then sock=/var/run/gemshare/scheduler.sock; \
	elif [ -n "$${XDG_RUNTIME_DIR:-}" ]; then sock="$$XDG_RUNTIME_DIR/gemshare/scheduler.sock"; \
	else sock="/tmp/gemshare-$$(id -u)/scheduler.sock"; \
	fi; \
	echo "gemshare-scheduler is starting on $$sock (Ctrl-C stops it). In another shell:"; \
	echo "  export GEMSHARE_SOCKET=$$sock"; \
	echo "  LD_PRELOAD=$(abspath $(BUILD))/libnvs.so python train.py"; \
	echo "  $(abspath $(VENV))/bin/gemsharectl status"; \
	exec $(HOLD_SIGNALS) $(VENV)/bin/gemshare-scheduler --socket "$$sock" \
	  $(if $(SCHEDULER_CONFIG),--config "$(SCHEDULER_CONFIG)") \
	  --state-dir "$(abspath $(SCHEDULER_STATE_DIR))" $(SCHEDULER_ARGS)

# The package goes in with pip --target: unlike a virtualenv, that folder holds no absolute paths
# of its own, so it can be staged under DESTDIR and moved into place. The commands in BINDIR are
# small launchers that run the pinned interpreter isolated (-I: no PYTHONPATH or current
# directory; -S: no site-packages) on that folder; gemshare-scheduler's interpreter line goes
# through hold-signals first, so that no signal kills it while Python starts. pip builds a local
# project in place, so it gets a copy under $(BUILD) to keep build files out of the source tree
# (one of its own, so that two makes at once do not meet).
install: ship-lib $(VENV)/.package $(HOLD_SIGNALS) $(WHEEL_LAUNCHER) man
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
	install -m 0755 $(BUILD)/ship/libnvs.so $(DESTDIR)$(PKGDIR)/libnvs.so
	@# Its debug file where gdb and systemd-coredump look for it by build ID (the default
	@# debug-file-directory, /usr/lib/debug, for PREFIX=/usr).
	id=$$(cat $(BUILD)/ship/libnvs.so.build-id) && \
	install -D -m 0644 $(BUILD)/ship/libnvs.so.debug \
	  $(DESTDIR)$(LIBDIR)/debug/.build-id/$$(echo $$id | cut -c1-2)/$$(echo $$id | cut -c3-).debug
	install -m 0755 $(HOLD_SIGNALS) $(DESTDIR)$(PKGDIR)/hold-signals
	rm -rf $(DESTDIR)$(PKGDIR)/python
	source=$$(mktemp -d $(BUILD)/python-src.XXXXXX) && cp -R $(PYTHON_SOURCES) $$source/ && \
	cp $(BUILD)/ship/libnvs.so $$source/nvs/libnvs.so && \
	cp $(WHEEL_LAUNCHER) $$source/launcher/gemshare-scheduler && \
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-warn-script-location \
		--no-compile --target $(DESTDIR)$(PKGDIR)/python "$$source[kubernetes]" && rm -rf $$source
	rm -rf $(DESTDIR)$(PKGDIR)/python/bin $(addprefix $(DESTDIR)$(PKGDIR)/python/,$(STRAY))
	@# Where a wheel carries the library, a link to it: gemsharectl library-path finds it there.
	ln -sfn ../../libnvs.so $(DESTDIR)$(PKGDIR)/python/gemshare_nvs/libnvs.so
	@# Bytecode made here names the final paths (-d), not the staging ones, in tracebacks.
	$(VENV)/bin/python -m compileall -q -d $(PKGDIR)/python $(DESTDIR)$(PKGDIR)/python
	@built=$$($(VENV)/bin/python -c 'import sys; print("%d, %d" % sys.version_info[:2])'); \
	dotted=$$($(VENV)/bin/python -c '$(PYTHON_VERSION)'); \
	for name in $(PROGRAMS); do \
	  case $$name in gemshare-scheduler) first='#!$(PKGDIR)/hold-signals $(INSTALL_PYTHON) -IS'; \
	      run='import runpy; runpy.run_module("gemshare_nvs.daemon", run_name="__main__")';; \
	    *) first='#!$(LAUNCHER_INTERPRETER) -IS'; \
	      run="from importlib.metadata import entry_points; (entry,) = entry_points(group=\"console_scripts\", name=\"$$name\"); sys.exit(entry.load()())";; \
	  esac; \
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
	    "$$run" > $(DESTDIR)$(BINDIR)/$$name && \
	  chmod 0755 $(DESTDIR)$(BINDIR)/$$name && echo "installed $(DESTDIR)$(BINDIR)/$$name"; \
	done
	@for unit in $(UNITS); do \
	  sed -e 's|^ExecStart=/usr/local/bin/gemshare-scheduler|ExecStart=$(BINDIR)/gemshare-scheduler|' \
	      -e 's|file:///usr/local/share/doc/gemshare/|file://$(DOCDIR)/|' \
	    systemd/$$unit > $(DESTDIR)$(SYSTEMDUNITDIR)/$$unit && \
	  chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$$unit && echo "installed $(DESTDIR)$(SYSTEMDUNITDIR)/$$unit"; \
	done
	@for doc in $(DOCS); do install -D -m 0644 $$doc $(DESTDIR)$(DOCDIR)/$$doc; done
	install -d $(DESTDIR)$(MANDIR)/man1
	install -m 0644 $(addprefix $(BUILD)/man/,$(MANPAGES)) $(DESTDIR)$(MANDIR)/man1/
	@for example in $(DROP_IN_EXAMPLES); do \
	  sed -e 's|^ExecStart=/usr/local/bin/gemshare-scheduler|ExecStart=$(BINDIR)/gemshare-scheduler|' \
	    systemd/gemshare-scheduler.service.d/$$example > $(DESTDIR)$(DOCDIR)/$$example && \
	  echo "installed $(DESTDIR)$(DOCDIR)/$$example"; \
	done

uninstall:
	@if [ -f $(BUILD)/ship/libnvs.so.build-id ]; then id=$$(cat $(BUILD)/ship/libnvs.so.build-id); \
	  rm -f $(DESTDIR)$(LIBDIR)/debug/.build-id/$$(echo $$id | cut -c1-2)/$$(echo $$id | cut -c3-).debug; \
	fi
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(PROGRAMS))
	rm -f $(addprefix $(DESTDIR)$(SYSTEMDUNITDIR)/,$(UNITS))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(MANPAGES))
	rm -rf $(DESTDIR)$(PKGDIR) $(DESTDIR)$(DOCDIR)

# Made again each time (a second): the help they come from is in every source of the commands.
man: $(VENV)/.package
	$(VENV)/bin/python man/manpage.py $(BUILD)/man

clean:
	rm -rf $(BUILD) $(DIST)

# Also what make downloads: Zig (.tools, about 400 MB) and the virtualenv.
distclean: clean
	rm -rf $(TOOLS) $(VENV)

# The list at the top of this file.
help:
	@sed -n -e '/^[^#]/q' -e 's/^# make/  make/p' $(firstword $(MAKEFILE_LIST))

# Each wheel is the package built by pip from a copy of the sources, as for make install, with
# that architecture's library inside it (stripped: its debug file goes beside the wheel, as
# libnvs-VERSION-ARCH.so.debug) and its gemshare-scheduler launcher (static), tagged for the
# glibc the library needs (manylinux_2_17_ARCH): nothing else in it depends on the machine. The
# sdist holds the sources a wheel is built from, the library's and the launcher's included
# (setup.py builds them).
MANYLINUX := manylinux_$(subst .,_,$(GLIBC_FLOOR))
dist: venv ship-libs wheel-launchers sdist
	@for arch in $(LIBNVS_ARCHES); do \
	  source=$$(mktemp -d $(BUILD)/dist-src.XXXXXX) && cp -R $(PYTHON_SOURCES) $$source/ && \
	  cp $(BUILD)/$$arch/ship/libnvs.so $$source/nvs/libnvs.so && \
	  cp $(BUILD)/$$arch/launcher/gemshare-scheduler $$source/launcher/gemshare-scheduler && \
	  $(VENV)/bin/python -m pip wheel -q --disable-pip-version-check --no-deps -w $(DIST) \
	    --config-settings=--build-option=--plat-name=$(MANYLINUX)_$$arch $$source && \
	  cp $(BUILD)/$$arch/ship/libnvs.so.debug $(DIST)/libnvs-$(VERSION)-$$arch.so.debug && \
	  rm -rf $$source || exit 1; \
	done
	@ls $(DIST)/*-$(MANYLINUX)_*.whl $(DIST)/*.so.debug $(DIST)/gemshare-$(VERSION).tar.gz

sdist: venv
	@mkdir -p $(BUILD)
	@source=$$(mktemp -d $(BUILD)/sdist-src.XXXXXX) && \
	  cp -R --parents $(SDIST_SOURCES) $$source/ && \
	  $(VENV)/bin/python -m build -q --sdist --outdir $(DIST) $$source >/dev/null && \
	  rm -rf $$source

# The image's pins: what pip picks today for gemshare[kubernetes], in a fresh virtualenv.
constraints:
	@venv=$$(mktemp -d $(BUILD)/constraints.XXXXXX) && $(PYTHON) -m venv $$venv && \
	$$venv/bin/python -m pip install -q --disable-pip-version-check -e '.[kubernetes,dra]' && \
	{ sed -n '1,/^$$/p' deploy/constraints.txt; \
	  $$venv/bin/python -m pip freeze --exclude gemshare; } > deploy/constraints.txt.new && \
	mv deploy/constraints.txt.new deploy/constraints.txt && rm -rf $$venv

# The lowest releases pyproject.toml allows (tests/lowest-versions.txt), in a virtualenv of
# their own, against the tests of what users see.
LOWEST_VENV ?= $(BUILD)/venv-lowest
LOWEST_TESTS ?= tests/ctl/test_ctl_help.py tests/ctl/test_ctl_errors.py tests/ctl/test_ctl_config.py \
	tests/ctl/test_ctl_status.py tests/service/test_scheduler_command_line.py tests/plugin tests/observe \
	tests/config tests/dra
test-lowest: tests-here lib fakecuda
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -m pip install -q -c tests/lowest-versions.txt -e '.[test]'
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) $(LOWEST_VENV)/bin/python -m pytest -q \
		-p no:cacheprovider $(LOWEST_TESTS)

# make bench-cpu   benchmarks on the fake driver, no GPU needed: lock handoff, launch overhead,
#                  scheduler scale, a pair with idle gaps (bench/README.md); BENCH_JSON=path also
#                  writes the results
# make bench-soak  a long run compressed into minutes (BENCH_SOAK_SECONDS, default 180): the
#                  scheduler's memory, descriptors and handoff latency before and after
# make bench-abuse what one unprivileged local user (uid 65534 when run as root) can take from
#                  the others: control connections, the log, metrics, reloads, start-up
# make bench-gpu   the scenario registry (bench/scenarios.py) on a real GPU, then its table:
#                  BENCH_SET=1, 2 and 3 are its three commands, each sized for under nine
#                  minutes on one H200 (default: all three, one after the other; with BENCH_ONLY,
#                  those parts alone);
#                  BENCH_PYTHON is the Python with PyTorch
BENCH_PYTHON ?= python3
BENCH_SET ?= $(if $(BENCH_ONLY),,all)
.PHONY: bench-cpu bench-soak bench-abuse bench-gpu
bench-cpu: tests-here lib fakecuda venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) $(VENV)/bin/python bench/run_cpu.py

bench-soak: tests-here lib fakecuda venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) $(VENV)/bin/python bench/soak.py

bench-abuse: tests-here lib fakecuda hold-signals venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) $(VENV)/bin/python bench/abuse.py

bench-gpu: tests-here lib venv
	GEMSHARE_BUILD_DIR=$(abspath $(BUILD)) BENCH_PYTHON=$(BENCH_PYTHON) BENCH_SET=$(BENCH_SET) \
		$(VENV)/bin/python bench/run_gpu.py

# make device-python  for a GPU machine that reaches no package index (bench/README.md, "On a
#                  machine with no package index"): the packages gemshare and its GPU tests and
#                  benches need, built for that machine's Python (DEVICE_PYTHON_VERSION), with
#                  gemshare itself, in DEVICE_PYTHON_DIR; there, PYTHONPATH=DEVICE_PYTHON_DIR and
#                  its python3 (the one with PyTorch) run bench/run_gpu.py and pytest tests/gpu.
DEVICE_PYTHON_DIR ?= .device/python
DEVICE_PYTHON_VERSION ?= 3.12
DEVICE_PLATFORMS ?= manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_28_x86_64
# The runtime dependencies and the test tools tests/gpu uses, as pyproject.toml bounds them; not
# the kubernetes extra (the device plugin's and the scheduler's gRPC, 19 MB), which no GPU test
# or bench needs.
DEVICE_REQUIREMENTS = $(VENV)/bin/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", \
	"rb"))["project"]; tools = ("pytest", "pytest-trio", "hypothesis"); \
	wanted = p["dependencies"] + [r for r in \
	p["optional-dependencies"]["test"] if r.split(">")[0].split("<")[0] in tools]; \
	print(" ".join(repr(r) for r in wanted if "python_version" not in r))'
.PHONY: device-python
device-python: venv
	rm -rf $(DEVICE_PYTHON_DIR)
	eval $(VENV)/bin/python -m pip install -q --disable-pip-version-check --target \
	  $(DEVICE_PYTHON_DIR) --python-version $(DEVICE_PYTHON_VERSION) --implementation cp \
	  --only-binary=:all: $(addprefix --platform ,$(DEVICE_PLATFORMS)) $$($(DEVICE_REQUIREMENTS))
	cp -R nvs $(DEVICE_PYTHON_DIR)/gemshare_nvs
	cp -R ctl $(DEVICE_PYTHON_DIR)/gemshare_ctl
	cp -R plugin $(DEVICE_PYTHON_DIR)/gemshare_plugin
	rm -rf $(DEVICE_PYTHON_DIR)/bin $(addprefix $(DEVICE_PYTHON_DIR)/,$(STRAY))
