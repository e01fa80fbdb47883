"""`python -m gemshare_ctl` runs gemsharectl."""

from .app import main

main()
