"""Slots: the units the plugin advertises, N per physical GPU, and how a request picks them.

A slot's device ID is the GPU's UUID, `::` and the slot's number (`GPU-8f3c...::3`), so that
every ID names its GPU without a table and stays the same across plugin restarts, which the
kubelet relies on to keep allocations it made earlier.

The preferred allocation spreads pods and packs each pod: a request's slots come from as few
GPUs as possible, taken first from the GPUs its required slots are on, then from the GPU with
the most of the offered slots still free. One pod then sees one GPU (several slots of one GPU
are still one GPU to it), and pods land on the least crowded GPU, where they wait least for the
lock.
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


def preferred(available: list[str], must_include: list[str], size: int) -> list[str]:
    """Up to `size` IDs from `available`, always with those of `must_include` (which the kubelet
    takes from `available` too); IDs that do not parse are never offered back."""
    chosen: list[str] = []
    taken: set[str] = set()
    for device_id in must_include:
        if parse_slot_id(device_id) is not None and device_id not in taken:
            chosen.append(device_id)
            taken.add(device_id)
    free: dict[str, dict[int, str]] = {}  # GPU UUID -> its offered slots by number
    for device_id in available:
        parsed = parse_slot_id(device_id)
        if parsed is not None and device_id not in taken:
            free.setdefault(parsed[0], {})[parsed[1]] = device_id
    first_gpus = {parse_slot_id(device_id)[0] for device_id in chosen}
    # Stable sort: among GPUs the required slots are on, or equally free ones, the order offered.
    order = sorted(free, key=lambda uuid: (uuid not in first_gpus, -len(free[uuid])))
    for uuid in order:
        wanted = size - len(chosen)
        if wanted <= 0:
            break
        chosen.extend(free[uuid][slot] for slot in sorted(free[uuid])[:wanted])
    return chosen
