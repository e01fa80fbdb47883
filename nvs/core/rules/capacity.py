"""How much memory mode `auto` lets the holders of a device fill, and where that figure came from.

Bookkeeping over what the shell read from NVML, the operator's limit and the totals that the
clients' drivers report; the rule itself is stated in policy.py's docstring (Capacity).
"""

from __future__ import annotations

from ..model.text import mib

# The most a client's report of a device's total is believed (docs/security.md): 16 TiB, some 60
# times the largest GPU made, so that no real device is cut short, while a report of 2^64 - 1
# never becomes the capacity every holder is granted by where NVML cannot say.
MAX_REPORTED_TOTAL = 16 << 40


def renumbered(by_device: dict[int, int], moves: dict[int, int | None]) -> dict[int, int]:
    """`by_device` with its keys moved (old -> new), and those moved to None left out."""
    result: dict[int, int] = {}
    for device, value in by_device.items():
        target = moves.get(device, device)
        if target is not None:
            result.setdefault(target, value)
    return result


class Capacity:
    def __init__(self, nvml: dict[int, int] | None = None, limit: int | None = None):
        self.nvml = dict(nvml or {})  # device -> bytes, read once by the shell
        self.limit = limit  # bytes, the operator's ceiling on every device
        self._reports: dict[int, dict[int, int]] = {}  # client -> device -> total it reported
        self._refused: set[tuple[int, int]] = set()  # (client, device) whose total was not
        # Device -> the largest report, worked out again only after a change, as every grant
        # asks; None until then.
        self._largest: dict[int, int] | None = None

    def of(self, device: int) -> tuple[int | None, str | None]:
        """The device's capacity in bytes and its source: "nvml", "reported" or "limit" (where
        the operator's limit is lower than, or stands in for, what the device holds)."""
        if device in self.nvml:
            found, source = self.nvml[device], "nvml"
        else:
            reported = self.reported(device)
            found, source = (reported, "reported") if reported else (None, None)
        if self.limit is not None and (found is None or self.limit < found):
            return self.limit, "limit"
        return found, source

    def reported(self, device: int) -> int:
        """The largest total a connected client reported for the device; 0 when none did."""
        if self._largest is None:
            self._largest = {}
            for totals in self._reports.values():
                for index, total in totals.items():
                    self._largest[index] = max(self._largest.get(index, 0), total)
        return self._largest.get(device, 0)

    def report(self, cid: int, device: int, total: int) -> str | None:
        """A client's driver says how many bytes the device holds; 0 says nothing. A total
        above MAX_REPORTED_TOTAL is not taken (where NVML says, NVML's figure is the capacity
        anyway); the first such report of a client for a device gives a warning, returned."""
        if not total:
            return None
        if total > MAX_REPORTED_TOTAL:
            if (cid, device) in self._refused:
                return None
            self._refused.add((cid, device))
            return (f"reports device {device} holds {total} bytes, more than any GPU "
                    f"({mib(MAX_REPORTED_TOTAL)}): not believed")
        if self._reports.get(cid, {}).get(device) != total:
            self._reports.setdefault(cid, {})[device] = total
            self._largest = None
        return None

    def device_total(self, device: int) -> int:
        """The most a client is believed to have allocated on a device: where NVML read it,
        what the node's largest GPU holds (a client's numbering may not be the scheduler's
        yet), else MAX_REPORTED_TOTAL. Fixed, so that a count once capped is never below a
        capacity reported later; and a count at the device's total leaves no room beside it
        either way."""
        return max(self.nvml.values()) if device in self.nvml else MAX_REPORTED_TOTAL

    def renumber(self, cid: int, moves: dict[int, int | None]) -> None:
        """What the client reported for device `old` is for device `new` (moves: old -> new;
        None: for a GPU no longer known, so it no longer counts)."""
        reports = self._reports.get(cid, {})
        self._reports[cid] = renumbered(reports, moves)
        self._largest = None

    def forget(self, cid: int) -> None:
        """A client left: what it reported leaves with it."""
        self._reports.pop(cid, None)
        self._refused = {key for key in self._refused if key[0] != cid}
        self._largest = None
