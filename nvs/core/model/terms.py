"""What each client is allowed, and who it is as configuration rules see it.

`Terms` is the policy's input about one client: its share of GPU time under contention and its
limits. `Identity` is what a configuration rule may match on. Both are plain values: config.py
turns a file into a function from Identity to Terms, the policy applies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...protocol import MpsPriority

TERM_NAMES = ("weight", "gpu_limit", "memory_limit", "sm_share", "mps", "mps_priority")
# Terms a program takes when it starts, in the driver's environment: a running program keeps them.
START_TERMS = ("sm_share", "mps", "mps_priority")
DEFAULT_SOURCE = "default"
OVERRIDE_SOURCE = "gemsharectl"
# Terms given with `gemsharectl client PID` belong to that connection: unlike settings, they are
# written nowhere, so status says plainly how long they stand.
OVERRIDES_LAST = "until the client disconnects or the scheduler restarts"


@dataclass(frozen=True)
class Identity:
    """A client as rules match it: from its connection's credentials and its REGISTER."""
    uid: int
    user: str  # "" when the uid has no name
    gid: int
    group: str
    process: str  # comm name as the client reported it
    pod: str
    namespace: str
    label: str  # the program's GEMSHARE_LABEL
    container: str = ""  # its Kubernetes container's name, only ever from the node


@dataclass(frozen=True)
class Terms:
    """A client's share and limits. `weight` is its relative share of lock time under
    contention; `gpu_limit` the fraction of the usage window it may hold a lock even when
    nobody waits (None: as much as it wants); `memory_limit` the bytes it may allocate on each
    device (None: no limit). Through MPS (`mps`: whether it may go through it at all),
    `sm_share` is the most of the GPU's multiprocessors it may use, in percent (None: all), and
    `mps_priority` whether the GPU prefers other clients' kernels to its own (LOW).
    `sources` says where each value came from, for status."""
    weight: float = 1.0
    gpu_limit: float | None = None
    memory_limit: int | None = None
    sm_share: int | None = None
    mps: bool = True
    mps_priority: MpsPriority = MpsPriority.NORMAL
    sources: tuple[tuple[str, str], ...] = field(
        default=tuple((name, DEFAULT_SOURCE) for name in TERM_NAMES))

    def source(self, name: str) -> str:
        return dict(self.sources).get(name, DEFAULT_SOURCE)

    def with_values(self, values: dict, source: str) -> "Terms":
        """These terms with `values` (a subset of TERM_NAMES) taken from `source`."""
        unknown = set(values) - set(TERM_NAMES)
        if unknown:
            raise ValueError(f"no such term: {', '.join(sorted(unknown))}")
        sources = dict(self.sources)
        sources.update((name, source) for name in values)
        return replace(self, **values, sources=tuple(sources.items()))


def no_rules(identity: Identity) -> Terms:
    """The terms of every client when no configuration says otherwise."""
    return Terms()
