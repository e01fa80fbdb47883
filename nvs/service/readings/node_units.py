"""What every container on the node holds of each GPU, read from the kubelet's pod-resources
`List` (directly, or through the node-identity service) every POLL_S for the policy core's
unheld units (core/rules/unheld.py).

Off the decision path: the call runs in a thread of its own, and the policy decides with the
last reading it was given, whatever the kubelet does meanwhile. A kubelet that is down, slow
(past POLL_S) or answers nonsense leaves the last reading in place: one warning when that
starts (and again when the reason changes), one line when readings come again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from ...core.model.container import HeldUnits
from ...kubernetes.lookups import LOG_PEER

log = logging.getLogger("gemshare.scheduler")

POLL_S = 5.0

Reading = tuple[HeldUnits, ...]


async def watch_node_units(read: Callable[[], tuple[Reading | None, str]],
                           take: Callable[[Reading], None], poll_s: float = POLL_S) -> None:
    """Give each reading `read()` makes (blocking: a NodeLookup's or IdentityClient's
    held_units) to `take` until cancelled."""
    threads = trio.CapacityLimiter(1)  # a hung call is never joined by another
    failing = ""  # why the last reading failed; "" while they succeed
    while True:
        reading, problem = None, f"no answer within {poll_s:g} s"
        with trio.move_on_after(poll_s):
            try:
                reading, problem = await trio.to_thread.run_sync(
                    read, limiter=threads, abandon_on_cancel=True)
            except Exception as exc:  # an answer we cannot read costs this reading alone
                log.exception("reading the node's units failed", extra=LOG_PEER)
                problem = f"the reading failed ({exc.__class__.__name__})"
        if reading is not None:
            if failing:
                log.info("the node's units are read again", extra=LOG_PEER)
            failing = ""
            take(reading)
        elif problem != failing:
            failing = problem
            log.warning("the node's units could not be read (%s); the last reading stays",
                        problem, extra=LOG_PEER)
        await trio.sleep(poll_s)
