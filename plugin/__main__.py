"""`python -m gemshare_plugin` runs gemshare-device-plugin."""

import sys

from .cli import main

sys.exit(main())
