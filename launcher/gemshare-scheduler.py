#!/usr/bin/env python3
"""gemshare-scheduler's Python part, as a wheel installs it beside the command itself.

The command gemshare-scheduler (launcher/beside_script.c) blocks SIGHUP, SIGUSR1 and SIGUSR2,
then runs this script, whose first line pip wrote for the interpreter it installed into. Run
directly, the interpreter's start is not covered: a signal then still kills it.
"""

import sys

from gemshare_nvs.daemon import main

sys.exit(main())
