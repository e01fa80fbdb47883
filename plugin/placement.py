"""Which units a container gets, and keeping a container's slots, memory and compute on one GPU.

How the kubelet asks (its device manager, pkg/kubelet/cm/devicemanager): it admits pods one at a
time, and a pod's containers one after the other, init containers first. For each container it
goes through the container's extended resources in no fixed order (they are a Go map), and for
each of ours it calls GetPreferredAllocation (with no topology advertised, always: the units it
could give, those the container must keep, how many it needs) and then Allocate with the units
it took, before it turns to the container's next resource. It takes the preferred units, and
fills up from the other free ones in no order when they are too few. An error from either call
fails the pod's admission, with the plugin's message in the pod's status and events.

Neither call says which pod or container it is for. So the plugin remembers the container it is
allocating: the resources it has had and the GPUs they went to, from the Allocate calls. A call
for a resource that container has not had yet, within CONTAINER_WINDOW_S of the last, is taken
as the same container's, and its units come from the GPUs of the earlier ones where there is
room; a call for a resource the container has had starts the next container. What that cannot
tell apart: two containers in a row that ask for different resources (the first memory only, the
next compute only) look like one, and the second is steered to the first's GPU where it has
room; that is only a preference, so nothing is ever refused on the strength of the guess.

Otherwise a request's units come from one GPU if any has room for them all. Memory and compute
units go by best fit: to the GPU with the fewest free units of that resource that still holds
them all, so that the large free stretches stay whole for the large requests to come (on two
80 GiB GPUs, 30, 30 and then 60 GiB all fit; spread one a GPU, the 60 would not); a GPU with
another resource all taken comes after those without, so that a container's next resource can
follow its first. Slots, which
fragment nothing, go to the GPU with the most room in every resource (its smallest free share
among the three, as the kubelet last showed them), then the most free slots: programs spread
over the GPUs and take turns with fewer others. Slots may spill over several GPUs when no one GPU
has enough (a pod may ask for several GPUs that way); memory and compute units may not: such a
request is refused, saying what each GPU has free.

Best fit is as far as the plugin can go: the kube-scheduler counts only the node's total of
each resource, so a node can still admit a request that no one of its GPUs holds (on two
80 GiB GPUs after 8, 45 and 45 GiB, 62 GiB are free, but no more than 35 on either GPU, however
they were placed). Dynamic Resource Allocation, where the cluster has it, places by GPU.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from .devices import DeviceList
from .resources import Resource

log = logging.getLogger("gemshare-device-plugin")

# The kubelet makes a container's calls back to back (milliseconds apart); a call this much
# later is another admission's.
CONTAINER_WINDOW_S = 2.0


class NoRoom(Exception):
    """No GPU has room for a request whose units must all be on one GPU."""


def gpus_in_order(resource: Resource, device_ids: Sequence[str]) -> list[str]:
    """The GPUs the parseable IDs are on, each once, in the order met."""
    return list(dict.fromkeys(parsed[0] for parsed in map(resource.parse, device_ids) if parsed))


def preferred(resource: Resource, available: Sequence[str], must_include: Sequence[str],
              size: int, first_gpus: Sequence[str] = (),
              room: Optional[Callable[[str], float]] = None) -> Optional[list[str]]:
    """Up to `size` IDs of `available`, always with the parseable ones of `must_include` (which
    the kubelet takes from `available` too); IDs that do not parse are never offered back.

    They come from one GPU with room for them all, tried in this order: the GPUs of the required
    IDs, those of `first_gpus`, then for memory and compute the fewest free (best fit; those
    with no `room` at all, another resource all taken, after the others), for slots by `room`
    (of a GPU's UUID, the more the sooner) and the most free; last the order offered. When none has room, slots (and units that must keep a required ID) fill the fewest
    GPUs, required ones first; memory and compute units get None."""
    chosen: list[str] = []
    for device_id in must_include:
        if resource.parse(device_id) is not None and device_id not in chosen:
            chosen.append(device_id)
    free: dict[str, dict[int, str]] = {}  # GPU UUID -> its offered IDs by index
    for device_id in available:
        parsed = resource.parse(device_id)
        if parsed is not None and device_id not in chosen:
            free.setdefault(parsed[0], {})[parsed[1]] = device_id
    wanted = size - len(chosen)
    if wanted <= 0:
        return chosen
    required = set(gpus_in_order(resource, chosen))
    offered = {uuid: position for position, uuid in enumerate(free)}

    def rank(uuid: str) -> tuple:
        if resource.one_gpu:
            # Only those that hold `wanted` are taken below. A GPU with another resource all
            # taken goes last: a container asking for that too could not follow there.
            fit = (room is not None and room(uuid) == 0, len(free[uuid]))
        else:
            fit = (-(room(uuid) if room else 0.0), -len(free[uuid]))
        return (uuid not in required, uuid not in first_gpus, *fit, offered[uuid])

    fitting = [uuid for uuid in sorted(free, key=rank) if len(free[uuid]) >= wanted]
    if fitting and (not required or fitting[0] in required):
        sources = fitting[:1]
    elif resource.one_gpu and not required:
        return None
    else:
        sources = sorted(free, key=lambda uuid: (uuid not in required, uuid not in first_gpus,
                                                 -len(free[uuid]), offered[uuid]))
    for uuid in sources:
        if len(chosen) == size:
            break
        chosen.extend(free[uuid][index] for index in sorted(free[uuid])[:size - len(chosen)])
    return chosen


@dataclass
class _Container:
    """The container being allocated, as far as the plugin can tell."""
    gpus: dict[str, list[str]] = field(default_factory=dict)  # resource name -> its GPUs
    at: float = 0.0  # when it last had an allocation


class Placement:
    """What the three resources' services share: the container being allocated, and each
    resource's free units per GPU as the kubelet last showed them."""

    def __init__(self, lists: dict[str, DeviceList], clock: Callable[[], float] = time.monotonic,
                 window: float = CONTAINER_WINDOW_S):
        self._lists = lists  # by resource name
        self._clock = clock
        self._window = window
        self._lock = threading.Lock()
        self._free: dict[str, Counter] = {}  # resource name -> free units by GPU UUID
        self._container: Optional[_Container] = None

    def prefer(self, resource: Resource, available: Sequence[str],
               must_include: Sequence[str], size: int) -> list[str]:
        """The units to offer for one container's request; NoRoom, saying why, when its memory
        or compute units fit on no one GPU."""
        with self._lock:
            kept = set(must_include)
            self._free[resource.name] = Counter(
                parsed[0] for parsed in (resource.parse(device_id) for device_id in available
                                         if device_id not in kept) if parsed)
            container = self._same_container(resource.name)
            first = [] if container is None else \
                [uuid for gpus in container.gpus.values() for uuid in gpus]
            chosen = preferred(resource, available, must_include, size, first, self._room())
            free = dict(self._free[resource.name])
        if chosen is None:
            raise NoRoom(self._refusal(resource, size, free))
        return chosen

    def allocated(self, resource: Resource, device_ids: Sequence[str]) -> None:
        """Note what the kubelet allocated (an Allocate call's units for one container)."""
        gpus = gpus_in_order(resource, device_ids)
        with self._lock:
            free = self._free.get(resource.name)
            for parsed in filter(None, map(resource.parse, device_ids)):
                if free is not None and free[parsed[0]] > 0:
                    free[parsed[0]] -= 1
            container = self._same_container(resource.name)
            if container is None:
                self._container = container = _Container()
            earlier = dict(container.gpus)
            container.gpus[resource.name] = gpus
            container.at = self._clock()
        elsewhere = {name: others for name, others in earlier.items() if set(others) != set(gpus)}
        if elsewhere:
            lists = self._lists[resource.name]
            log.warning(
                "%s: %s on %s, while %s, allocated just before and most likely to the same "
                "container, went to %s, which had no room for these: that container sees one "
                "of those GPUs (the kubelet keeps whichever NVIDIA_VISIBLE_DEVICES it meets "
                "first) and each budget holds on its own GPU",
                resource.name, resource.amount(len(device_ids)),
                ", ".join(map(lists.named, gpus)), " and ".join(elsewhere),
                ", ".join(lists.named(uuid) for others in elsewhere.values() for uuid in others))

    def _same_container(self, resource_name: str) -> Optional[_Container]:
        """The container being allocated, if a call for `resource_name` now is still its."""
        container = self._container
        if container is None or resource_name in container.gpus or \
                self._clock() - container.at > self._window:
            return None
        return container

    def _room(self) -> Callable[[str], float]:
        """A GPU's room: its smallest free share among the resources seen so far."""
        totals = {name: self._lists[name].counts() for name in self._free}
        shares: dict[str, list[float]] = {}
        for name, free in self._free.items():
            for uuid, total in totals[name].items():
                if total:
                    shares.setdefault(uuid, []).append(free[uuid] / total)
        return lambda uuid: min(shares.get(uuid, [1.0]))

    def _refusal(self, resource: Resource, size: int, free: dict[str, int]) -> str:
        lists = self._lists[resource.name]
        totals = lists.counts()
        largest = max(totals.values(), default=0)
        must = f"a container's {resource.kind} units must all be on one GPU"
        if size > largest:
            return (f"{resource.name}: {resource.amount(size)} are more than one GPU of this "
                    f"node has (the largest has {largest}), and {must}")
        shown = "; ".join(f"{lists.named(uuid)}: {free.get(uuid, 0)} of {total}"
                          for uuid, total in totals.items())
        return (f"{resource.name}: no GPU of this node has {resource.amount(size)} free, and "
                f"{must} (the kube-scheduler counts what the whole node has free); free now: "
                f"{shown or 'no GPUs'}")
