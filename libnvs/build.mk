# Builds libnvs.so from libnvs/*/*.c; no CUDA toolkit needed. Owned by the libnvs work.
#   make lib                      build/libnvs.so, for this machine's architecture
#   make libs                     build/x86_64/libnvs.so and build/aarch64/libnvs.so (and lib)
#   make lib PORTABLE=0           build/libnvs.so with $(CC), for this machine's glibc only
#   make lib SANITIZE=thread      build/tsan/libnvs.so (ThreadSanitizer, for the many-threads test;
#                                 preload libtsan.so first, see libnvs/README.md)
#   make check-cuda-api           prove libnvs/cuda/cuda_api.h and hooks.def against cuda.h, or
#                                 skip
#   make check-nvml-api           prove libnvs/nvml/nvml_api.h against nvml.h (in NVML_INCLUDE,
#                                 by default CUDA_INCLUDE), or skip
#
# The library is preloaded into programs of any image, so it is built against glibc 2.17
# (CentOS 7, the oldest any CUDA release still supports) with Zig's C compiler, which carries
# every glibc's symbol versions and builds for either architecture from one machine. Zig comes
# from PyPI (ziglang, pinned) into $(TOOLS), which `make clean` keeps (`make distclean` not);
# ZIG= names another (setup.py gives the one pip's build environment holds). build/libnvs.so is a copy
# of the build for this machine, renewed whenever the chosen one (PORTABLE) differs.
BUILD ?= build
CC ?= cc
PYTHON ?= python3
CUDA_INCLUDE ?= /usr/local/cuda/include
# nvml.h: in a CUDA toolkit with its NVML development part, or in PyPI's nvidia-nvml-dev.
NVML_INCLUDE ?= $(CUDA_INCLUDE)
PORTABLE ?= 1
TOOLS ?= .tools
GLIBC_FLOOR := 2.17
LIBNVS_ARCHES := x86_64 aarch64
HOST_ARCH := $(shell uname -m)
ZIGLANG_VERSION := 0.17.1
ZIG_DIR := $(TOOLS)/ziglang-$(ZIGLANG_VERSION)
ZIG := $(ZIG_DIR)/ziglang/zig
# Zig's compiler for one architecture and glibc $(GLIBC_FLOOR), or the one given second:
# $(call zig_cc,aarch64) or $(call zig_cc,aarch64,2.28). Zig turns the undefined-behaviour
# sanitizer on by default in some modes; the library never wants it.
zig_cc = $(ZIG) cc -target $(1)-linux-gnu.$(or $(2),$(GLIBC_FLOOR)) -fno-sanitize=undefined

# One folder per part (libnvs/README.md); includes name the folder: #include "base/log.h".
# cuda_api_check.c and nvml_api_check.c are compile-time proofs, never part of the library.
LIBNVS_SRC := $(filter-out %_api_check.c,$(wildcard libnvs/*/*.c))
LIBNVS_DEPS := $(LIBNVS_SRC) $(wildcard libnvs/*/*.h libnvs/*/*.def) libnvs/build.mk
LIBNVS_CFLAGS := -std=gnu11 -O2 -g -fPIC -fvisibility=hidden -Wall -Wextra -Werror -pthread \
                 -Ilibnvs
# -fvisibility=hidden: only what is marked GS_EXPORT (hooked entry points, dlsym) leaves it.
LIBNVS_LDFLAGS := -shared -Wl,-z,defs
LIBNVS_LIBS := -ldl -pthread

ifeq ($(PORTABLE),1)
LIBNVS_CHOSEN := $(BUILD)/$(HOST_ARCH)/libnvs.so
else
LIBNVS_CHOSEN := $(BUILD)/host/libnvs.so
endif

.PHONY: lib libs zig check-cuda-api check-nvml-api FORCE
ifeq ($(SANITIZE),thread)
# The ThreadSanitizer runtime is the host compiler's, so is this build.
lib: $(BUILD)/tsan/libnvs.so
else
lib: $(BUILD)/libnvs.so
endif
libs: lib $(LIBNVS_ARCHES:%=$(BUILD)/%/libnvs.so)
zig: $(ZIG)

# Renamed into place, never written over: programs running now keep the library they mapped.
$(BUILD)/libnvs.so: $(LIBNVS_CHOSEN) FORCE
	@cmp -s $< $@ || { cp $< $@.new && mv -f $@.new $@; }
FORCE:

$(LIBNVS_ARCHES:%=$(BUILD)/%/libnvs.so): $(BUILD)/%/libnvs.so: $(LIBNVS_DEPS) | $(ZIG)
	@mkdir -p $(dir $@)
	$(call zig_cc,$*) $(LIBNVS_CFLAGS) $(LIBNVS_LDFLAGS) -o $@ $(LIBNVS_SRC) $(LIBNVS_LIBS)

$(BUILD)/host/libnvs.so: $(LIBNVS_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(LIBNVS_CFLAGS) $(LIBNVS_LDFLAGS) -o $@ $(LIBNVS_SRC) $(LIBNVS_LIBS)

$(BUILD)/tsan/libnvs.so: $(LIBNVS_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(LIBNVS_CFLAGS) -fsanitize=thread -O1 $(LIBNVS_LDFLAGS) -o $@ $(LIBNVS_SRC) \
		$(LIBNVS_LIBS) -fsanitize=thread

$(ZIG):
	$(PYTHON) -m pip install -q --disable-pip-version-check --no-warn-script-location \
		--root-user-action=ignore --target $(ZIG_DIR) ziglang==$(ZIGLANG_VERSION) || { \
	    echo "cannot install Zig (ziglang $(ZIGLANG_VERSION)) from PyPI into $(ZIG_DIR) with" \
	         "$(PYTHON) -m pip (PYTHON= names another Python); make PORTABLE=0 builds with" \
	         "$(CC) for this machine's glibc only" >&2; exit 1; }

check-cuda-api:
	@if [ -f "$(CUDA_INCLUDE)/cuda.h" ] && [ -f "$(CUDA_INCLUDE)/cudaTypedefs.h" ]; then \
	    $(CC) -std=gnu11 -Wall -Wextra -Werror -D__CUDA_API_VERSION_INTERNAL \
	        -I"$(CUDA_INCLUDE)" -Ilibnvs -fsyntax-only libnvs/cuda/cuda_api_check.c && \
	    echo "check-cuda-api: ok: libnvs/cuda/cuda_api.h and libnvs/cuda/hooks.def match $(CUDA_INCLUDE)/cuda.h"; \
	else \
	    echo "check-cuda-api: skipped: no cuda.h/cudaTypedefs.h in $(CUDA_INCLUDE) (set CUDA_INCLUDE=...)"; \
	fi

check-nvml-api:
	@if [ -f "$(NVML_INCLUDE)/nvml.h" ]; then \
	    $(CC) -std=gnu11 -Wall -Wextra -Werror -I"$(NVML_INCLUDE)" -Ilibnvs -fsyntax-only \
	        libnvs/nvml/nvml_api_check.c && \
	    echo "check-nvml-api: ok: libnvs/nvml/nvml_api.h matches $(NVML_INCLUDE)/nvml.h"; \
	else \
	    echo "check-nvml-api: skipped: no nvml.h in $(NVML_INCLUDE) (set NVML_INCLUDE=...)"; \
	fi
