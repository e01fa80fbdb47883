"""What the units held by all of the node's containers leave unheld of each GPU, and what that
gives a container that holds none of a kind there, as part of the policy core.

The shell reads what every container holds of each GPU from the kubelet every few seconds
(service/readings/node_units.py) and gives it to `node_units`. Per GPU:

- memory: the GPU's memory (the capacity the scheduler decides with) less the memory units held
  there. Every program on the GPU whose container holds no memory units there shares it as one
  memory limit, told in LIMITS with what the others of them have allocated (`budget_used`, as
  for a container's budget), so that together they stay within what the units leave and the
  memory-unit holders find what they were promised. Nothing left is a limit of MIN_MEMORY_BYTES
  (a limit of 0 would read as none);
- compute: 100 less the compute units held, a weight of unheld / 10 for the containers there
  that hold no compute units, split among those of them that want the GPU at the moment (as a
  container's weight is split among its programs), at least MIN_WEIGHT each: with 99 units held
  the compute-less container weighs 0.1 beside 9.9;
- a kind nobody holds on the GPU leaves nothing to share: no memory limit, weight 1, as before.

Only programs the node names (in a container) are given these terms; a GPU whose memory the
scheduler does not know (no NVML, no report) leaves no memory limit until it does. BudgetRules
(budgets.py) turns these figures into terms; UnheldUnits keeps the last reading.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..model.actions import Log
from ..model.container import HeldUnits
from ..model.text import mib, printable

COMPUTE_UNITS_PER_GPU = 100
UNITS_PER_WEIGHT = 10  # compute units that weigh 1
MIN_WEIGHT = 0.01  # the least a compute-less container weighs, however little is left
MIN_MEMORY_BYTES = 1 << 20  # the limit when the memory units hold the whole GPU


@dataclass(frozen=True)
class Unheld:
    """What the node's containers leave of one GPU: None for a kind nobody holds there."""
    gpu_uuid: str
    memory_bytes: int | None  # what memory-less containers share; None: no limit
    compute_units: int | None  # what compute-less containers weigh, in units; None: weight 1


def unheld_of(held: HeldUnits, gpu_memory: int | None) -> Unheld:
    """What `held` leaves of a GPU of `gpu_memory` bytes (None: unknown)."""
    memory = None
    if held.memory_bytes and gpu_memory is not None:
        memory = max(gpu_memory - held.memory_bytes, MIN_MEMORY_BYTES)
    compute = max(COMPUTE_UNITS_PER_GPU - held.compute_units, 0) if held.compute_units else None
    return Unheld(held.gpu_uuid, memory, compute)


def pool_weight(unheld_compute: int, containers: int = 1) -> float:
    """The weight of each of `containers` compute-less containers that want a GPU on which
    `unheld_compute` units are left."""
    return max(unheld_compute / UNITS_PER_WEIGHT / max(containers, 1), MIN_WEIGHT)


def unheld_terms(memory_held: bool, compute_held: bool, unheld: Unheld | None) -> dict:
    """The terms a container that holds memory units there (`memory_held`) or compute units
    (`compute_held`) takes from what the GPU leaves: for each kind it holds none of."""
    values = {}
    if unheld is None:
        return values
    if not memory_held and unheld.memory_bytes is not None:
        values["memory_limit"] = unheld.memory_bytes
    if not compute_held and unheld.compute_units is not None:
        values["weight"] = pool_weight(unheld.compute_units)
    return values


class UnheldUnits:
    """The last reading of what the node's containers hold, and what it leaves each GPU.
    `gpu_memory(uuid)` says a GPU's memory, None where the scheduler does not know it."""

    def __init__(self, gpu_memory: Callable[[str], int | None]):
        self.gpu_memory = gpu_memory
        self.held: dict[str, HeldUnits] = {}  # GPU UUID -> the last reading's
        self.unheld: dict[str, Unheld] = {}  # GPU UUID -> what that left
        self._unknown: set[str] = set()  # GPUs logged as of unknown memory

    def of(self, gpu_uuid: str) -> Unheld | None:
        return self.unheld.get(gpu_uuid) if gpu_uuid else None

    def take(self, reading: tuple[HeldUnits, ...]) -> tuple[set[str], list]:
        """A new reading: the GPUs whose unheld figures changed, and log lines. A GPU listed
        twice counts once (its first entry), as a malformed listing can say it."""
        held: dict[str, HeldUnits] = {}
        logs = []
        for entry in reading:
            if entry.gpu_uuid in held:
                logs.append(Log(f"node units: GPU {printable(entry.gpu_uuid, 48)} listed twice; "
                                "the first entry is taken", warning=True))
                continue
            held[entry.gpu_uuid] = entry
        unheld = {}
        for uuid, entry in held.items():
            memory = self.gpu_memory(uuid)
            if memory is None and entry.memory_bytes and uuid not in self._unknown:
                self._unknown.add(uuid)
                logs.append(Log(f"node units: GPU {printable(uuid, 48)} has "
                                f"{mib(entry.memory_bytes)} of memory units held, but its memory "
                                "is unknown to the scheduler: no limit for containers without "
                                "memory units there until it is known", warning=True))
            elif memory is not None:
                self._unknown.discard(uuid)
            if entry.compute_units > COMPUTE_UNITS_PER_GPU and \
                    held.get(uuid) != self.held.get(uuid):
                logs.append(Log(f"node units: GPU {printable(uuid, 48)} has "
                                f"{entry.compute_units} compute units held, more than "
                                f"{COMPUTE_UNITS_PER_GPU}: none is left", warning=True))
            unheld[uuid] = unheld_of(entry, memory)
        changed = {uuid for uuid in {*unheld, *self.unheld}
                   if unheld.get(uuid) != self.unheld.get(uuid)}
        self.held, self.unheld = held, unheld
        logs += [Log(f"node units: {self._words(uuid)}") for uuid in sorted(changed)]
        return changed, logs

    def _words(self, uuid: str) -> str:
        unheld, held = self.unheld.get(uuid), self.held.get(uuid)
        if unheld is None or held is None:
            return f"GPU {printable(uuid, 48)}: no units held any more"
        memory = f"memory units hold {mib(held.memory_bytes)}" + \
            (f", {mib(unheld.memory_bytes)} left to the others" if unheld.memory_bytes else "")
        compute = f"compute units {held.compute_units}" + \
            (f", {unheld.compute_units} left to the others" if unheld.compute_units is not None
             else "")
        return f"GPU {printable(uuid, 48)} ({held.containers} containers): {memory}; {compute}"

    def view(self) -> list[dict]:
        """Each GPU of the last reading, for status."""
        return [{"gpu_uuid": uuid, "containers": held.containers,
                 "memory_held_bytes": held.memory_bytes,
                 "memory_unheld_bytes": self.unheld[uuid].memory_bytes,
                 "compute_held_units": held.compute_units,
                 "compute_unheld_units": self.unheld[uuid].compute_units}
                for uuid, held in sorted(self.held.items())]
