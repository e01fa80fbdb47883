"""Slots' device IDs: N per physical GPU, each the GPU's UUID, `::` and the slot's number.

`GPU-8f3c...::3` names its GPU without a table and stays the same across plugin restarts, which
the kubelet relies on to keep allocations it made earlier. Which slots a request gets is
placement.py's.
"""

from __future__ import annotations

SEPARATOR = "::"
# The kubelet refuses device IDs longer than this.
MAX_ID_LENGTH = 63


def slot_id(uuid: str, slot: int) -> str:
    return f"{uuid}{SEPARATOR}{slot}"


def slot_ids(uuid: str, slots: int) -> list[str]:
    return [slot_id(uuid, slot) for slot in range(slots)]


def parse_slot_id(device_id: str) -> tuple[str, int] | None:
    """(GPU UUID, slot number) of an ID as slot_id writes it, else None."""
    uuid, separator, number = device_id.rpartition(SEPARATOR)
    if not separator or not uuid or not number.isdigit() or not number.isascii() \
            or str(int(number)) != number:
        return None
    return uuid, int(number)
