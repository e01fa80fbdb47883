# Builds hold-signals (launcher/hold_signals.c), through which gemshare-scheduler starts: make
# install makes it the installed command's interpreter, and make scheduler runs the scheduler
# through it.
#   $(BUILD)/hold-signals    for this machine: static with Zig's C compiler and musl (the
#                            variables of libnvs/build.mk), so that no dynamic loader runs
#                            before it blocks the signals; with PORTABLE=0, $(CC)'s usual build
HOLD_SIGNALS := $(BUILD)/hold-signals
HOLD_SIGNALS_SRC := launcher/hold_signals.c
HOLD_SIGNALS_CFLAGS := -std=gnu11 -O2 -s -Wall -Wextra -Werror

.PHONY: hold-signals
hold-signals: $(HOLD_SIGNALS)

ifeq ($(PORTABLE),1)
$(HOLD_SIGNALS): $(HOLD_SIGNALS_SRC) launcher/build.mk | $(ZIG)
	@mkdir -p $(dir $@)
	$(ZIG) cc -target $(HOST_ARCH)-linux-musl -static -fno-sanitize=undefined \
		$(HOLD_SIGNALS_CFLAGS) -o $@ $(HOLD_SIGNALS_SRC)
else
$(HOLD_SIGNALS): $(HOLD_SIGNALS_SRC) launcher/build.mk
	@mkdir -p $(dir $@)
	$(CC) $(HOLD_SIGNALS_CFLAGS) -o $@ $(HOLD_SIGNALS_SRC)
endif
