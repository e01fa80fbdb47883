"""The container of each registering program, found without holding up the scheduler.

The blocking work (reading /proc/PID/cgroup, the gRPC calls of node.py) runs in threads, the
calls in a few threads of their own so that a hung runtime or kubelet cannot take the threads
other work needs. A registration waits for the answer at most `wait_s`; past that it goes on
with the node's default terms (never with what the program says of itself: `who_is`), and the
program's pod is looked up again, after 1, 2, 4 ... up to MAX_NAMING_BACKOFF_S seconds, until
the node names it (`named_later`). Answers are kept by container ID: a container's pod and units
do not change while it runs, so the node is asked once per container, again after RETRY_S when
it could not list the units, and after UNNAMED_RETRY_S when it could not name the pod.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import trio

from ..core.model.container import (
    NAMED_BY_NODE,
    NAMED_BY_PROGRAM,
    NOT_NAMED_YET,
    OUTSIDE_PODS,
    HeldUnits,
    NodeIdentity,
)
from ..core.model.text import printable
from .cgroups import PROC, ContainerRef, container_of
from .grpc_calls import GrpcMissing
from .identity_client import IdentityClient
from .node import NodeLookup, chosen_sockets

log = logging.getLogger("gemshare.scheduler")

REGISTER_WAIT_S = 2.5  # two calls of node.CALL_TIMEOUT_S, and room to spare
RETRY_S = 10.0  # an answer that misses the units is asked for again after this
UNNAMED_RETRY_S = 1.0  # one that misses the pod, after this: its programs wait on it
MAX_NAMING_BACKOFF_S = 30.0  # the longest between two lookups of a program not named yet
MAX_KNOWN = 4096  # containers remembered, the least recently asked for forgotten first
LOOKUP_THREADS = 4
LOG_PEER = {"peer": "the node's Kubernetes sockets"}  # whose budget of log lines it spends


@dataclass(frozen=True)
class Found:
    """What the node said of a program's container; `identity` None when it could not say."""
    container_id: str
    identity: NodeIdentity | None
    problem: str = ""


def described(identity: NodeIdentity) -> str:
    units = [f"{gpu.gpu_uuid}: {gpu.memory_units} memory units ({gpu.memory_bytes >> 20} MiB), "
             f"{gpu.compute_units} compute units" for gpu in identity.gpus]
    return f"{printable(identity.qualified)}, {'; '.join(units) or 'no units'}"


def node_lookups(cri: str | None, pod_resources: str | None,
                 proc: Path = PROC, identity_service: str | None = None) -> NodeLookups | None:
    """The lookups for the sockets the settings give: the node-identity service's where one is
    given (which asks the other two for us), else the runtime's and the kubelet's
    (node.chosen_sockets); None where none is given or found: then every program is known by
    what it says, as outside Kubernetes, except those whose cgroup names a pod (who_is).
    GrpcMissing when a socket was given and gRPC is not installed."""
    if identity_service:
        if cri or pod_resources:
            log.warning("--cri-socket and --pod-resources-socket are left to the node-identity "
                        "service at %s, which asks them", identity_service)
        log.info("programs' containers and their units from the node-identity service at %s",
                 identity_service)
        return NodeLookups(IdentityClient(identity_service), proc)
    cri_path, pod_resources_path = chosen_sockets(cri, pod_resources)
    if not cri_path:
        if pod_resources_path:
            log.warning("the kubelet's pod-resources socket %s is of no use without the "
                        "container runtime's CRI socket (--cri-socket): no program in a pod "
                        "can be named", pod_resources_path)
        return None
    try:
        lookup = NodeLookup(cri_path, pod_resources_path)
    except GrpcMissing as missing:
        if cri or pod_resources:
            raise
        log.warning("found %s but %s: no program in a pod can be named", cri_path, missing)
        return None
    log.info("programs' containers from the runtime at %s, their units from %s", cri_path,
             f"the kubelet at {pod_resources_path}" if pod_resources_path else
             "nowhere (no pod-resources socket): no container budgets")
    return NodeLookups(lookup, proc)


class NodeLookups:
    def __init__(self, lookup: NodeLookup | IdentityClient, proc: Path = PROC, wait_s: float = REGISTER_WAIT_S,
                 unnamed_retry_s: float = UNNAMED_RETRY_S):
        self.lookup = lookup
        self.proc = proc
        self.wait_s = wait_s
        self.unnamed_retry_s = unnamed_retry_s
        self._known: OrderedDict[str, tuple[Found, float]] = OrderedDict()  # and until when
        self._pending: dict[str, trio.Event] = {}
        self._threads: trio.CapacityLimiter | None = None  # made in serve(), inside Trio
        self._nursery: trio.Nursery | None = None

    def status(self) -> dict:
        """The sockets asked, for status."""
        return {**self.lookup.status(), "containers_known": len(self._known)}

    @property
    def lists_units(self) -> bool:
        """Whether the node can be asked what all its containers hold (held_units)."""
        return self.lookup.lists_units

    def held_units(self) -> tuple[tuple[HeldUnits, ...] | None, str]:
        """What all the node's containers hold of each GPU, or None and why not. Blocking:
        service/readings/node_units.py runs it in a thread of its own."""
        return self.lookup.held_units()

    def readiness(self) -> str | None:
        """Why the scheduler cannot name programs in pods now (a socket it was given is
        missing), or None."""
        return "; ".join(self.lookup.missing()) or None

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run the lookups that registrations start, until cancelled."""
        self._threads = trio.CapacityLimiter(LOOKUP_THREADS)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.lookup.close()

    async def identify(self, pid: int) -> Found | None:
        """The container of process `pid`; None for a process in no container. Within
        `wait_s`: later, a Found without identity that says so."""
        ref = None
        with trio.move_on_after(self.wait_s):
            ref = await trio.to_thread.run_sync(container_of, pid, self.proc,
                                                abandon_on_cancel=True)
            if ref is None:
                return None
            return await self._answer(ref)
        return Found(ref.container_id if ref else "", None,
                     f"the node did not answer within {self.wait_s:g} s")

    async def named_later(self, pid: int) -> NodeIdentity | None:
        """The container of process `pid`, which the node could not name when it registered:
        asked again, backing off, until the node names it; None when the process turns out to
        be in no container."""
        delay = self.unnamed_retry_s
        while True:
            await trio.sleep(delay)
            found = await self.identify(pid)
            if found is None:
                return None
            if found.identity is not None:
                return found.identity
            delay = min(delay * 2, MAX_NAMING_BACKOFF_S)

    def _remembered(self, container_id: str, now: float) -> Found | None:
        entry = self._known.get(container_id)
        if entry is None or now >= entry[1]:
            return None
        self._known.move_to_end(container_id)
        return entry[0]

    async def _answer(self, ref: ContainerRef) -> Found:
        found = self._remembered(ref.container_id, trio.current_time())
        if found is not None:
            return found
        event = self._pending.get(ref.container_id)
        if event is None:
            event = self._pending[ref.container_id] = trio.Event()
            self._nursery.start_soon(self._ask, ref, event)
        await event.wait()
        return self._remembered(ref.container_id, trio.current_time()) or \
            Found(ref.container_id, None, "the lookup ended without an answer")

    async def _ask(self, ref: ContainerRef, event: trio.Event) -> None:
        try:
            try:
                identity, problem = await trio.to_thread.run_sync(
                    self.lookup.identify, ref, limiter=self._threads, abandon_on_cancel=True)
            except Exception as exc:  # an answer we cannot read costs this lookup alone
                log.exception("container %s: asking the node failed", ref.container_id[:12],
                              extra=LOG_PEER)
                identity, problem = None, f"the lookup failed ({exc.__class__.__name__})"
            self._remember(Found(ref.container_id, identity, problem))
        finally:
            del self._pending[ref.container_id]
            event.set()

    def _remember(self, found: Found) -> None:
        kept = RETRY_S if found.identity is not None else self.unnamed_retry_s
        until = trio.current_time() + kept if found.problem else float("inf")
        self._known[found.container_id] = (found, until)
        self._known.move_to_end(found.container_id)
        while len(self._known) > MAX_KNOWN:
            self._known.popitem(last=False)
        short, identity, problem = found.container_id[:12], found.identity, found.problem
        if identity is None:
            log.warning("container %s: %s; its programs have the node's default terms until "
                        "the node names its pod", short, printable(problem), extra=LOG_PEER)
        elif problem:
            log.warning("container %s is %s: %s", short, described(identity), printable(problem),
                        extra=LOG_PEER)
        else:
            log.info("container %s is %s", short, described(identity), extra=LOG_PEER)


async def who_is(lookups: NodeLookups | None, pid: int,
                 proc: Path = PROC) -> tuple[NodeIdentity | None, str]:
    """What the node says of process `pid`: its container where the node names it, and who
    named it (model/container.py). Without lookups (no CRI socket) the node can still tell a
    process in a pod by its cgroup: that one is NOT_NAMED_YET for good, and only a process in
    no pod is taken at its word."""
    if lookups is not None:
        found = await lookups.identify(pid)
        if found is None:
            return None, OUTSIDE_PODS
        return found.identity, NAMED_BY_NODE if found.identity is not None else NOT_NAMED_YET
    named_by = NOT_NAMED_YET  # what a cgroup that cannot be read in time leaves it
    with trio.move_on_after(REGISTER_WAIT_S):
        ref = await trio.to_thread.run_sync(container_of, pid, proc, abandon_on_cancel=True)
        named_by = NAMED_BY_PROGRAM if ref is None else NOT_NAMED_YET
    return None, named_by
