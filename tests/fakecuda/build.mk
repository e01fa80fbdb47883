# Builds the fake CUDA driver and the stand-in programs under $(BUILD)/fakecuda. Owned by the
# fake-driver work. gcc alone: declarations come from libnvs/cuda/cuda_api.h and tests/fakecuda.
#   $(BUILD)/fakecuda/libcuda.so.1    the test double of the driver (soname libcuda.so.1)
#   $(BUILD)/fakecuda/standin         finds the driver as the CUDA runtime does (dlopen)
#   $(BUILD)/fakecuda/standin_linked  the same program linked against libcuda.so.1 (and the fake
#                                     NVML library)
#   $(BUILD)/fakecuda/libnvidia-ml.so.1   the fake GPU's NVML library (nvml_library.c; not the
#                                     Python stand-in tests/fake_nvml/pynvml.py)
#   $(BUILD)/ARCH/fakecuda/{libcuda.so.1,standin}   the driver and the stand-in for the other
#                                     architecture (make fakecuda-cross, Zig's compiler as in
#                                     libnvs/build.mk), for the smoke test under qemu-user
FAKECUDA_DIR := $(BUILD)/fakecuda
FAKECUDA_SRC := $(wildcard tests/fakecuda/fake_*.c)
FAKECUDA_HDR := $(wildcard tests/fakecuda/*.h tests/fakecuda/*.def) libnvs/cuda/cuda_api.h \
                libnvs/cuda/hooks.def libnvs/nvml/nvml_api.h
# The NVML library sees the same simulated GPU: its configuration and memory (fake_gpu.c).
FAKENVML_SRC := tests/fakecuda/nvml_library.c tests/fakecuda/fake_gpu.c
STANDIN_SRC := $(wildcard tests/fakecuda/standin*.c)
FAKECUDA_CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Werror -pthread -Ilibnvs -Itests/fakecuda

.PHONY: fakecuda fakecuda-cross
fakecuda: $(FAKECUDA_DIR)/libcuda.so.1 $(FAKECUDA_DIR)/libnvidia-ml.so.1 $(FAKECUDA_DIR)/standin \
          $(FAKECUDA_DIR)/standin_linked
FAKECUDA_CROSS_ARCHES := $(filter-out $(HOST_ARCH),$(LIBNVS_ARCHES))
# Test programs only, so a newer glibc than the library's will do: the fake needs memfd_create.
FAKECUDA_CROSS_GLIBC := 2.28
fakecuda-cross: $(foreach arch,$(FAKECUDA_CROSS_ARCHES),\
                  $(BUILD)/$(arch)/fakecuda/libcuda.so.1 $(BUILD)/$(arch)/fakecuda/standin)

# -Bsymbolic: the driver's own references (and the addresses cuGetProcAddress hands out) bind
# inside it, never to a preloaded library's function of the same name.
$(FAKECUDA_DIR)/libcuda.so.1: $(FAKECUDA_SRC) $(FAKECUDA_HDR)
	@mkdir -p $(FAKECUDA_DIR)
	$(CC) $(FAKECUDA_CFLAGS) -fPIC -fvisibility=hidden -shared -Wl,-soname,libcuda.so.1 \
		-Wl,-Bsymbolic -o $@ $(FAKECUDA_SRC) -pthread
	ln -sf libcuda.so.1 $(FAKECUDA_DIR)/libcuda.so

$(FAKECUDA_DIR)/libnvidia-ml.so.1: $(FAKENVML_SRC) $(FAKECUDA_HDR)
	@mkdir -p $(FAKECUDA_DIR)
	$(CC) $(FAKECUDA_CFLAGS) -fPIC -fvisibility=hidden -shared -Wl,-soname,libnvidia-ml.so.1 \
		-Wl,-Bsymbolic -o $@ $(FAKENVML_SRC) -pthread

$(FAKECUDA_DIR)/standin: $(STANDIN_SRC) $(FAKECUDA_HDR)
	@mkdir -p $(FAKECUDA_DIR)
	$(CC) $(FAKECUDA_CFLAGS) -o $@ $(STANDIN_SRC) -ldl -pthread

$(FAKECUDA_DIR)/standin_linked: $(STANDIN_SRC) $(FAKECUDA_HDR) $(FAKECUDA_DIR)/libcuda.so.1 \
		$(FAKECUDA_DIR)/libnvidia-ml.so.1
	$(CC) $(FAKECUDA_CFLAGS) -DSTANDIN_LINKED -o $@ $(STANDIN_SRC) \
		-L$(FAKECUDA_DIR) -l:libcuda.so.1 -l:libnvidia-ml.so.1 -Wl,-rpath,'$$ORIGIN' -ldl -pthread

$(LIBNVS_ARCHES:%=$(BUILD)/%/fakecuda/libcuda.so.1): $(BUILD)/%/fakecuda/libcuda.so.1: \
		$(FAKECUDA_SRC) $(FAKECUDA_HDR) | $(ZIG)
	@mkdir -p $(dir $@)
	$(call zig_cc,$*,$(FAKECUDA_CROSS_GLIBC)) $(FAKECUDA_CFLAGS) -fPIC -fvisibility=hidden -shared \
		-Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic -o $@ $(FAKECUDA_SRC) -pthread

$(LIBNVS_ARCHES:%=$(BUILD)/%/fakecuda/standin): $(BUILD)/%/fakecuda/standin: \
		$(STANDIN_SRC) $(FAKECUDA_HDR) | $(ZIG)
	@mkdir -p $(dir $@)
	$(call zig_cc,$*,$(FAKECUDA_CROSS_GLIBC)) $(FAKECUDA_CFLAGS) -o $@ $(STANDIN_SRC) -ldl -pthread
