"""The host's memory, read from /proc/meminfo once a second for the policy core's staging budget
(core/rules/memory/staging_budget.py): what the kernel can hand out without swapping (MemAvailable) and
the whole (MemTotal). A file that cannot be read, or lacks either line, is skipped: the budget
then keeps the last reading, or only the operator's setting.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio

MEMINFO = Path("/proc/meminfo")
POLL_S = 1.0


def read_meminfo(path: Path = MEMINFO) -> tuple[int, int] | None:
    """(MemAvailable, MemTotal) in bytes; None when the file does not say both."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    found = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemAvailable", "MemTotal"):
            words = rest.split()
            if words and words[0].isdigit():
                found[key] = int(words[0]) << 10 if words[1:] == ["kB"] else int(words[0])
    if len(found) < 2:
        return None
    return found["MemAvailable"], found["MemTotal"]


async def watch_host_memory(take: Callable[[int, int], None], path: Path = MEMINFO,
                            poll_s: float = POLL_S) -> None:
    """Give each reading to `take(available, total)` until cancelled."""
    while True:
        reading = read_meminfo(path)
        if reading is not None:
            take(*reading)
        await trio.sleep(poll_s)
