# Builds $(BUILD)/libnvs.so from libnvs/*.c. Owned by the libnvs work.
LIBNVS_SRC := $(wildcard libnvs/*.c)
LIBNVS_CFLAGS := -std=gnu11 -O2 -g -fPIC -fvisibility=hidden -Wall -Wextra -Werror -pthread
lib: $(BUILD)/libnvs.so
$(BUILD)/libnvs.so: $(LIBNVS_SRC) $(wildcard libnvs/*.h libnvs/*.def)
	@mkdir -p $(BUILD)
	$(CC) $(LIBNVS_CFLAGS) -shared -o $@ $(LIBNVS_SRC) -ldl -pthread
