"""How much memory mode `auto` lets the holders of a device fill, and where that figure came from.

Bookkeeping over what the shell read from NVML, the operator's limit and the totals that the
clients' drivers report; the rule itself is stated in policy.py's docstring (Capacity).
"""

from __future__ import annotations


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

    def report(self, cid: int, device: int, total: int) -> None:
        """A client's driver says how many bytes the device holds; 0 says nothing."""
        if total and self._reports.get(cid, {}).get(device) != total:
            self._reports.setdefault(cid, {})[device] = total
            self._largest = None

    def renumber(self, cid: int, moves: dict[int, int | None]) -> None:
        """What the client reported for device `old` is for device `new` (moves: old -> new;
        None: for a GPU no longer known, so it no longer counts)."""
        reports = self._reports.get(cid, {})
        self._reports[cid] = renumbered(reports, moves)
        self._largest = None

    def forget(self, cid: int) -> None:
        """A client left: what it reported leaves with it."""
        self._reports.pop(cid, None)
        self._largest = None
