# The library as it ships (wheels, make install, the image): without debug information, about a
# third of the size, beside its debug file. Used with libnvs/build.mk, whose compilers and flags
# it takes:
#   make -f libnvs/build.mk -f ship.mk ship-lib      $(BUILD)/ship/libnvs.so, .debug and
#                                                    .build-id, this machine's (PORTABLE=0:
#                                                    with $(CC))
#   make -f libnvs/build.mk -f ship.mk ship-libs     both architectures, $(BUILD)/ARCH/ship/
# Both files carry one build ID, made from the sources, the compiler and the flags: gdb,
# debuginfod and systemd-coredump find the debug file of a stripped library by it (installed as
# /usr/lib/debug/.build-id/NN/REST.debug). The debug file is the whole library, debug
# information included: a valid library itself, and what `make lib` builds, but for the ID.
comma := ,
SHIP_COMPILER_x86_64 = $(call zig_cc,x86_64)
SHIP_COMPILER_aarch64 = $(call zig_cc,aarch64)
SHIP_COMPILER_host = $(CC)
ship_compile = $(SHIP_COMPILER_$(1)) $(LIBNVS_CFLAGS) $(LIBNVS_LDFLAGS) -Wl,--build-id=0x$$id \
	$(2) -o $(3) $(LIBNVS_SRC) $(LIBNVS_LIBS)
ifeq ($(PORTABLE),1)
SHIP_CHOSEN := $(HOST_ARCH)
else
SHIP_CHOSEN := host
endif

.PHONY: ship-lib ship-libs
ship-lib: $(BUILD)/$(SHIP_CHOSEN)/ship/libnvs.so
	@mkdir -p $(BUILD)/ship
	cp $(addprefix $(BUILD)/$(SHIP_CHOSEN)/ship/libnvs.so,"" .debug .build-id) $(BUILD)/ship/
ship-libs: $(LIBNVS_ARCHES:%=$(BUILD)/%/ship/libnvs.so)

# Zig is needed for these two alone: PORTABLE=0 builds never ask for them.
$(LIBNVS_ARCHES:%=$(BUILD)/%/ship/libnvs.so): | $(ZIG)
$(BUILD)/%/ship/libnvs.so: $(LIBNVS_DEPS) ship.mk
	@mkdir -p $(dir $@)
	@echo "ship $*: $@ and $@.debug, its build ID in $@.build-id"
	@id=$$({ cat $(LIBNVS_DEPS); echo '$(call ship_compile,$*,,)'; } | sha1sum | cut -c1-40) && \
	$(call ship_compile,$*,,$@.debug) && \
	$(call ship_compile,$*,-Wl$(comma)--strip-all,$@) && \
	echo $$id > $@.build-id
