"""The DRA driver's loop: every `poll_s` it reads the GPUs, puts the node's ResourceSlice when
it is missing or differs from what the GPUs say (the pool's generation one past the kept one),
and serves the kubelet again where a socket was lost.

The API server may be away (restarting, unreachable): the slice is put again at a later turn,
backing off to MAX_RETRY_S, while claims already prepared keep being answered from their CDI
specs. The slice is left in place when the driver stops: the kube-scheduler keeps placing
claims on a node whose driver restarts, and the node's deletion takes the slice with it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from .api_server import ApiError
from .inventory import GpuInventory, Inventory
from .resource_slice import Capacity, resource_slice, slice_name

log = logging.getLogger("gemshare-dra-plugin")
POLL_S = 10.0
MAX_RETRY_S = 60.0


@dataclass
class SliceState:
    inventory: Inventory = Inventory()
    sent: dict | None = None  # the spec last put, its generation left out
    kept: dict | None = None  # the spec the server answered that put with
    owner: dict | None = None
    dropped_said: bool = False


def _content(spec: dict) -> dict:
    """A slice's spec without its pool's generation: what says whether it changed."""
    return {**spec, "pool": {key: value for key, value in spec["pool"].items()
                             if key != "generation"}}


def _shares_dropped(sent: dict, kept: dict) -> bool:
    """Whether the server kept the devices without what lets claims share them (an API server
    whose DRAConsumableCapacity feature gate is off drops those fields)."""
    return any(device.get("allowMultipleAllocations") for device in sent.get("devices", [])) \
        and not any(device.get("allowMultipleAllocations")
                    for device in kept.get("devices", []))


class Driver:
    def __init__(self, node: str, api, capacity: Capacity, services=None,
                 inventory: GpuInventory | None = None, poll_s: float = POLL_S):
        self.node = node
        self.api = api
        self.capacity = capacity
        self.services = services  # server.KubeletServices, set before run()
        self.gpus = inventory or GpuInventory()
        self.poll_s = poll_s
        self.state = SliceState()
        self.published = threading.Event()  # the slice is as the GPUs say
        self.last_round = time.monotonic()  # when the loop last went round (liveness)

    def current_inventory(self) -> Inventory:
        return self.state.inventory

    def readiness(self) -> str | None:
        """None when ready (registered with the kubelet, the slice put), else why not; what
        plugin/health.py's probes answer."""
        if not self.services.registered.is_set():
            return "not registered with the kubelet (yet)"
        if not self.published.is_set():
            return "the node's ResourceSlice is not put on the API server"
        return None

    def turn(self) -> bool:
        """One look at the GPUs, the slice and the sockets; False when the API server failed."""
        self.state.inventory = self.gpus.read()
        try:
            self.services.ensure()
        except OSError as exc:  # a directory of the kubelet's not there (yet), say
            log.error("cannot serve the kubelet: %s; trying again", exc)
        try:
            self._publish()
        except ApiError as error:
            log.warning("the node's ResourceSlice is not put: %s; trying again", error)
            self.published.clear()
            return False
        return True

    def _publish(self) -> None:
        state = self.state
        if state.owner is None:
            try:
                state.owner = self.api.node_owner(self.node)
            except ApiError as error:
                if not error.not_found:
                    raise
                log.warning("no Node %s on the API server: its ResourceSlice has no owner",
                            self.node)
        current = self.api.current_slice(slice_name(self.node))
        generation = (current or {}).get("spec", {}).get("pool", {}).get("generation", 0)
        wanted = resource_slice(self.node, state.inventory, self.capacity, generation,
                                state.owner)
        # Unchanged: as wanted, or as the server kept what was wanted last time (it may drop
        # fields it does not serve; putting the slice again would not bring them back).
        if current is not None and (current.get("spec") == wanted["spec"] or (
                current.get("spec") == state.kept and _content(wanted["spec"]) == state.sent)):
            self.published.set()
            return
        wanted["spec"]["pool"]["generation"] = generation + 1
        kept = self.api.put_slice(wanted, current)
        state.sent, state.kept = _content(wanted["spec"]), kept.get("spec")
        log.info("ResourceSlice %s: %d GPUs (pool generation %s)", slice_name(self.node),
                 len(wanted["spec"]["devices"]), kept.get("spec", {}).get("pool", {})
                 .get("generation"))
        if _shares_dropped(wanted["spec"], kept.get("spec") or {}) and not state.dropped_said:
            log.warning("the API server kept the GPUs without allowMultipleAllocations: it does "
                        "not serve consumable capacity (turn on the DRAConsumableCapacity "
                        "feature gate before Kubernetes 1.36), so each GPU goes to one claim "
                        "whole")
            state.dropped_said = True
        self.published.set()

    def run(self, stop: threading.Event) -> None:
        wait = self.poll_s
        try:
            while not stop.is_set():
                wait = self.poll_s if self.turn() else min(MAX_RETRY_S, max(1.0, wait * 2))
                self.last_round = time.monotonic()
                stop.wait(wait)
        finally:
            self.services.stop()
            self.gpus.close()
