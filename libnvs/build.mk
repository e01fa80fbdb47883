# Builds $(BUILD)/libnvs.so from libnvs/*/*.c with gcc alone. Owned by the libnvs work.
#   make lib                      build/libnvs.so
#   make lib SANITIZE=thread      build/tsan/libnvs.so (ThreadSanitizer, for the many-threads test;
#                                 preload libtsan.so first, see libnvs/README.md)
#   make check-cuda-api           prove libnvs/cuda/cuda_api.h and hooks.def against cuda.h, or
#                                 skip
CUDA_INCLUDE ?= /usr/local/cuda/include

# One folder per part (libnvs/README.md); includes name the folder: #include "base/log.h".
# cuda_api_check.c is a compile-time proof, never part of the library.
LIBNVS_SRC := $(filter-out libnvs/cuda/cuda_api_check.c,$(wildcard libnvs/*/*.c))
LIBNVS_DEPS := $(LIBNVS_SRC) $(wildcard libnvs/*/*.h libnvs/*/*.def) libnvs/build.mk
LIBNVS_CFLAGS := -std=gnu11 -O2 -g -fPIC -fvisibility=hidden -Wall -Wextra -Werror -pthread \
                 -Ilibnvs
# -fvisibility=hidden: only what is marked GS_EXPORT (hooked entry points, dlsym) leaves it.
LIBNVS_LDFLAGS := -shared -Wl,-z,defs
LIBNVS_LIBS := -ldl -pthread

ifeq ($(SANITIZE),thread)
LIBNVS_OUT := $(BUILD)/tsan/libnvs.so
LIBNVS_CFLAGS += -fsanitize=thread -O1
LIBNVS_LIBS += -fsanitize=thread
else
LIBNVS_OUT := $(BUILD)/libnvs.so
endif

.PHONY: lib check-cuda-api
lib: $(LIBNVS_OUT)
$(LIBNVS_OUT): $(LIBNVS_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(LIBNVS_CFLAGS) $(LIBNVS_LDFLAGS) -o $@ $(LIBNVS_SRC) $(LIBNVS_LIBS)

check-cuda-api:
	@if [ -f "$(CUDA_INCLUDE)/cuda.h" ] && [ -f "$(CUDA_INCLUDE)/cudaTypedefs.h" ]; then \
	    $(CC) -std=gnu11 -Wall -Wextra -Werror -D__CUDA_API_VERSION_INTERNAL \
	        -I"$(CUDA_INCLUDE)" -Ilibnvs -fsyntax-only libnvs/cuda/cuda_api_check.c && \
	    echo "check-cuda-api: ok: libnvs/cuda/cuda_api.h and libnvs/cuda/hooks.def match $(CUDA_INCLUDE)/cuda.h"; \
	else \
	    echo "check-cuda-api: skipped: no cuda.h/cudaTypedefs.h in $(CUDA_INCLUDE) (set CUDA_INCLUDE=...)"; \
	fi
