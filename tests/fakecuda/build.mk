# Builds the fake CUDA driver and the stand-in programs under $(BUILD)/fakecuda. Owned by the
# fake-driver work. gcc alone: declarations come from libnvs/cuda/cuda_api.h and tests/fakecuda.
#   $(BUILD)/fakecuda/libcuda.so.1    the test double of the driver (soname libcuda.so.1)
#   $(BUILD)/fakecuda/standin         finds the driver as the CUDA runtime does (dlopen)
#   $(BUILD)/fakecuda/standin_linked  the same program linked against libcuda.so.1
FAKECUDA_DIR := $(BUILD)/fakecuda
FAKECUDA_SRC := $(wildcard tests/fakecuda/fake_*.c)
FAKECUDA_HDR := $(wildcard tests/fakecuda/*.h tests/fakecuda/*.def) libnvs/cuda/cuda_api.h \
                libnvs/cuda/hooks.def
STANDIN_SRC := $(wildcard tests/fakecuda/standin*.c)
FAKECUDA_CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Werror -pthread -Ilibnvs -Itests/fakecuda

.PHONY: fakecuda
fakecuda: $(FAKECUDA_DIR)/libcuda.so.1 $(FAKECUDA_DIR)/standin $(FAKECUDA_DIR)/standin_linked

# -Bsymbolic: the driver's own references (and the addresses cuGetProcAddress hands out) bind
# inside it, never to a preloaded library's function of the same name.
$(FAKECUDA_DIR)/libcuda.so.1: $(FAKECUDA_SRC) $(FAKECUDA_HDR)
	@mkdir -p $(FAKECUDA_DIR)
	$(CC) $(FAKECUDA_CFLAGS) -fPIC -fvisibility=hidden -shared -Wl,-soname,libcuda.so.1 \
		-Wl,-Bsymbolic -o $@ $(FAKECUDA_SRC) -pthread
	ln -sf libcuda.so.1 $(FAKECUDA_DIR)/libcuda.so

$(FAKECUDA_DIR)/standin: $(STANDIN_SRC) $(FAKECUDA_HDR)
	@mkdir -p $(FAKECUDA_DIR)
	$(CC) $(FAKECUDA_CFLAGS) -o $@ $(STANDIN_SRC) -ldl -pthread

$(FAKECUDA_DIR)/standin_linked: $(STANDIN_SRC) $(FAKECUDA_HDR) $(FAKECUDA_DIR)/libcuda.so.1
	$(CC) $(FAKECUDA_CFLAGS) -DSTANDIN_LINKED -o $@ $(STANDIN_SRC) \
		-L$(FAKECUDA_DIR) -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN' -ldl -pthread
