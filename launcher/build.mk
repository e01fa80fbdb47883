# Builds the two launchers through which gemshare-scheduler starts, each blocking SIGHUP,
# SIGUSR1 and SIGUSR2 before Python starts (launcher/held_signals.h):
#   $(BUILD)/hold-signals          make install's: the installed command's interpreter line
#                                  runs it; make scheduler and the image run the scheduler
#                                  through it
#   $(BUILD)/launcher/gemshare-scheduler
#                                  a wheel's gemshare-scheduler (launcher/beside_script.c), for
#                                  this machine: make install and the image build their wheel
#                                  with it; setup.py builds it where none is given, with the
#                                  same flags
#   $(BUILD)/ARCH/launcher/gemshare-scheduler
#                                  the same for each architecture make dist builds a wheel for
# Static with Zig's C compiler and musl (the variables of libnvs/build.mk), so that no dynamic
# loader runs before the signals are blocked; with PORTABLE=0, $(CC)'s usual build.
HOLD_SIGNALS := $(BUILD)/hold-signals
HOLD_SIGNALS_SRC := launcher/hold_signals.c
LAUNCHER_DEPS := launcher/held_signals.h launcher/build.mk
LAUNCHER_CFLAGS := -std=gnu11 -O2 -s -Wall -Wextra -Werror
zig_static = $(ZIG) cc -target $(1)-linux-musl -static -fno-sanitize=undefined $(LAUNCHER_CFLAGS)

WHEEL_LAUNCHER := $(BUILD)/launcher/gemshare-scheduler
WHEEL_LAUNCHER_SRC := launcher/beside_script.c

.PHONY: hold-signals wheel-launcher wheel-launchers
hold-signals: $(HOLD_SIGNALS)
wheel-launcher: $(WHEEL_LAUNCHER)
wheel-launchers: $(LIBNVS_ARCHES:%=$(BUILD)/%/launcher/gemshare-scheduler)

ifeq ($(PORTABLE),1)
$(HOLD_SIGNALS): $(HOLD_SIGNALS_SRC) $(LAUNCHER_DEPS) | $(ZIG)
	@mkdir -p $(dir $@)
	$(call zig_static,$(HOST_ARCH)) -o $@ $(HOLD_SIGNALS_SRC)
$(WHEEL_LAUNCHER): $(WHEEL_LAUNCHER_SRC) $(LAUNCHER_DEPS) | $(ZIG)
	@mkdir -p $(dir $@)
	$(call zig_static,$(HOST_ARCH)) -o $@ $(WHEEL_LAUNCHER_SRC)
else
$(HOLD_SIGNALS): $(HOLD_SIGNALS_SRC) $(LAUNCHER_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(LAUNCHER_CFLAGS) -o $@ $(HOLD_SIGNALS_SRC)
$(WHEEL_LAUNCHER): $(WHEEL_LAUNCHER_SRC) $(LAUNCHER_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(LAUNCHER_CFLAGS) -o $@ $(WHEEL_LAUNCHER_SRC)
endif

$(LIBNVS_ARCHES:%=$(BUILD)/%/launcher/gemshare-scheduler): \
    $(BUILD)/%/launcher/gemshare-scheduler: $(WHEEL_LAUNCHER_SRC) $(LAUNCHER_DEPS) | $(ZIG)
	@mkdir -p $(dir $@)
	$(call zig_static,$*) -o $@ $(WHEEL_LAUNCHER_SRC)
