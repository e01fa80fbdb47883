"""The scheduler's rules as a pure state machine, in the sans-IO style of h11.

No sockets, no clock, no Trio: every event method takes the current time (`now`, seconds on any
monotonic clock) and returns a list of actions (see actions.py) for the shell to carry out.
`tick(now)` fires the timers and `next_deadline()` says when the next one is due, so a test can
drive every rule with a fake clock.

Rules (docs/protocol.md): one lock per device, granted first come first served for a
time quantum (TQ). When the quantum is over and someone waits, the holder gets DROP_LOCK; if it
does not answer with LOCK_RELEASED within the grace period it is revoked and the next waiter is
granted. Nobody waiting means no drop. In mode `off` no lock exists at all.

Mode `auto` lets several clients hold one device's lock while their memory fits
(admission.py does the arithmetic):

- Capacity: NVML's total for the device when the shell gave one, else the largest total that a
  connected client's driver reported for it, lowered to the operator's limit when one is set
  (which also stands in for an unknown total); unknown capacity means one holder, as in `on`.
  Holders fit when their allocated bytes (MEM_REPORT; none yet counts as 0) plus the context
  reserve once per holder stay within the capacity. A single holder always fits.
- Admission: waiters are considered first come first served; each is granted at once if it fits
  beside all current holders (those asked to drop included, as they still use the device).
  Grants to a set of two or more holders carry GRANT_SHARED.
- Bounded overtaking: a waiter that does not fit may be passed by later ones that do, but only
  while it has waited less than one TQ. Once it has waited a TQ nobody behind it is granted
  until it is; the holders' quanta then run out (each was granted before that moment, so within
  one more TQ), they are dropped as in `on`, and it is granted at the latest when the last of
  them releases or is revoked: within TQ + grace of reaching the head with a TQ of waiting.
- Shrinking: when the holders not yet asked to drop no longer fit (a holder's allocations
  grew, the capacity fell, or the mode became `on`), the scheduler keeps them oldest grant
  first, each one that still fits beside those kept, and sends DROP_LOCK (with the usual grace
  and revocation) to the rest. A dropped holder asks again like any other client and queues at
  the back: putting it at the front would need a grant it did not ask for, and a holder
  displaced again and again could then keep a long waiter waiting without end.
- Switching modes: `auto` -> `on` shrinks to the oldest holder; `on` -> `auto` admits waiters
  that fit; `off` clears every lock as before.

Moving memory (docs/protocol.md, "Moving memory"; cost.py does the arithmetic, residency.py
keeps the estimate of where each client's memory is):

- A grant that needs room waits for it: the outgoing holder's DROP_LOCK names the bytes to move
  out, and what is still missing when the lock is free is asked of clients that do not hold it
  (EVICT), once per grant; the grant follows their MOVED reports or their deadlines.
- A holder that is moving memory is given time for it: grace plus bytes / measured rate, pushed
  on by each progress report. Revocation is for a holder that neither drains nor moves.
- A grant tells a client when another ran since its last grant (GRANT_OTHERS_RAN), so that it
  brings its memory back in bulk; and a holder whose handoff would swap memory is told to keep
  the lock through idle gaps shorter than twice that swap (IDLE_HINT).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import protocol as p
from .actions import Close, Log, Send
from .admission import Budget, Waiting, admitted, kept
from .cost import GB, Link, idle_release_ms, room_to_make
from .residency import Residency, take

# Device indices are u32 on the wire; a bound keeps one client from creating millions of queues.
MAX_DEVICES = 1024
# Distinct devices one client may name (REGISTER, REQUEST_LOCK, MEM_REPORT): far above any
# machine's GPU count, and low enough that no client can swell the status past one frame.
MAX_DEVICES_PER_CLIENT = 64

RELEASE_WORDS = {p.ReleaseReason.DROPPED: "after drop", p.ReleaseReason.IDLE: "early (idle)",
                 p.ReleaseReason.REVOKED: "after revocation"}


def printable(text: str, limit: int = 256) -> str:
    """Client-supplied text made safe for one log line and for status."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:limit])


def _device_out_of_range(cid: int, device: int) -> Close:
    return Close(cid, f"device index {device} is out of range (below {MAX_DEVICES})",
                 p.ErrorCode.PROTOCOL)


def _too_many_devices(cid: int, device: int) -> Close:
    return Close(cid, f"device {device} is one too many: a client may name at most "
                      f"{MAX_DEVICES_PER_CLIENT} distinct devices", p.ErrorCode.PROTOCOL)


def _listed(indices: list[int]) -> str:
    return ", ".join(map(str, indices))


def _mib(count: int) -> str:
    return f"{count / (1 << 20):.0f} MiB"


@dataclass
class Client:
    id: int
    pid: int
    uid: int
    gid: int
    name: str
    device: int  # the GPU it registered, as the scheduler numbers GPUs (see _device_of)
    namespace: str
    pod: str
    flags: int
    connected_since: float  # wall-clock (Unix) time, given by the shell
    hold_time: float = 0.0  # finished holds only; a running hold is added when reporting
    waits: int = 0
    wait_time: float = 0.0  # finished waits only
    allocated: dict[int, int] = field(default_factory=dict)  # device -> bytes
    device_total: dict[int, int] = field(default_factory=dict)  # device -> bytes, as reported
    revocations: int = 0
    revoked: bool = False  # its last lock was taken away and it has not been granted since
    ordinal: int = 0  # what the client itself calls that GPU (its CUDA ordinal)
    gpu_uuid: str = ""
    named: set[int] = field(default_factory=set)  # devices it has named, in its own numbering
    last_grant: dict[int, int] = field(default_factory=dict)  # device -> number of its last grant

    def may_name(self, ordinal: int) -> bool:
        """Whether naming `ordinal` keeps the client within MAX_DEVICES_PER_CLIENT; counts it."""
        if ordinal not in self.named and len(self.named) >= MAX_DEVICES_PER_CLIENT:
            return False
        self.named.add(ordinal)
        return True

    def scheduler_device(self, ordinal: int) -> int | None:
        """The scheduler's index for a device the client names by its own ordinal. Only the
        registered device's identity is known; other ordinals are taken as they are when the
        client's numbering is the scheduler's, and are unknown (None) otherwise."""
        if ordinal == self.ordinal:
            return self.device
        return ordinal if self.device == self.ordinal else None

    def own_ordinal(self, device: int) -> int:
        """What the client calls the scheduler's device `device`."""
        return self.ordinal if device == self.device else device

    def __str__(self) -> str:
        return f"client {self.id} (pid {self.pid}, {self.name or '?'})"


@dataclass
class Hold:
    granted_at: float
    quantum_end: float
    dropped_at: float | None = None  # when DROP_LOCK was sent
    revoke_at: float = 0.0  # once dropped: grace, plus the time its move out may take
    idle_hint_ms: int = 0  # the last IDLE_HINT sent for this hold


@dataclass
class Wait:
    since: float
    queued: bool  # it had to wait behind someone, so its grant carries GRANT_AFTER_WAIT
    room_asked: bool = False  # clients were asked to move memory out for its grant


@dataclass
class Device:
    index: int
    holders: dict[int, Hold] = field(default_factory=dict)
    waiters: dict[int, Wait] = field(default_factory=dict)  # insertion order is FCFS order
    evictions: dict[int, tuple[float, int]] = field(default_factory=dict)  # client -> EVICT's
    # deadline and bytes

    @property
    def idle(self) -> bool:
        return not self.holders and not self.waiters


class Policy:
    def __init__(self, tq: int, mode: p.Mode, grace_s: float, max_clients: int,
                 reserve_bytes: int = 512 << 20, nvml_capacity: dict[int, int] | None = None,
                 capacity_limit: int | None = None, nvml_uuids: dict[str, int] | None = None):
        self.tq = tq
        self.mode = mode
        self.grace_s = grace_s
        self.max_clients = max_clients
        self.reserve = reserve_bytes  # per holder, for its CUDA context (mode auto)
        self.nvml_capacity = dict(nvml_capacity or {})  # device -> bytes, read once by the shell
        self.capacity_limit = capacity_limit  # bytes, the operator's ceiling on every device
        self.nvml_uuids = dict(nvml_uuids or {})  # GPU UUID -> NVML index, read once by the shell
        self.uuid_devices: dict[str, int] = {}  # GPUs NVML did not name: UUID -> index given
        self.clients: dict[int, Client] = {}
        self.devices: dict[int, Device] = {}  # only devices with a holder or a waiter
        self.revocations = 0
        self.residency = Residency()
        self.links: dict[int, Link] = {}  # device -> its measured moves, kept while we run
        self.grants: dict[int, int] = {}  # device -> grants made on it so far
        self._reported: dict[int, int] | None = None  # _reported_total's memory

    # ----- events -------------------------------------------------------------------------

    def register(self, cid: int, pid: int, uid: int, gid: int, message: p.Register,
                 now: float, wall: float) -> list:
        if cid in self.clients:
            return [Close(cid, f"client {cid} is already registered", p.ErrorCode.PROTOCOL)]
        if len(self.clients) >= self.max_clients:
            return [Log(f"refused pid {pid}: already {self.max_clients} clients (--max-clients)"),
                    Close(cid, f"the scheduler already serves its limit of {self.max_clients} "
                               "clients; try again later or raise --max-clients",
                          p.ErrorCode.TOO_MANY_CLIENTS)]
        if message.device >= MAX_DEVICES:
            return [Close(cid, f"device index {message.device} is out of range (below "
                               f"{MAX_DEVICES})", p.ErrorCode.PROTOCOL)]
        client = Client(cid, pid, uid, gid, printable(message.process_name, 64),
                        message.device, printable(message.pod_namespace, 64),
                        printable(message.pod_name), message.flags, wall, ordinal=message.device,
                        named={message.device})
        self.clients[cid] = client
        pod = f", pod {client.namespace}/{client.pod}" if client.pod else ""
        return [Send(cid, p.Registered(cid, self.mode, self.tq)),
                Log(f"register {client}: uid {uid}, device {client.device}{pod}")]

    def device_uuid(self, cid: int, device: int, uuid: str, now: float) -> list:
        """The client says which physical GPU its registered device is: from now on it is keyed
        by that GPU, whatever its own numbering (CUDA_VISIBLE_DEVICES)."""
        client = self.clients.get(cid)
        if client is None:
            return []
        uuid = printable(uuid, 48)
        if device != client.ordinal or not uuid or client.gpu_uuid:
            return [Log(f"GPU UUID from {client} for its device {device} ignored: only one, for "
                        "the device it registered", debug=True)]
        if any(cid in dev.holders or cid in dev.waiters for dev in self.devices.values()):
            return [Log(f"GPU UUID from {client} ignored: it came after a lock request, so the "
                        f"client stays on device {client.device}")]
        index = self._device_of(uuid, client.ordinal)
        if index != client.ordinal:
            # Its other devices' numbers no longer mean ours: keep only the registered one.
            client.allocated = {index: client.allocated.get(client.ordinal, 0)}
            client.device_total = {index: client.device_total[client.ordinal]} \
                if client.ordinal in client.device_total else {}
            resident = self.residency.of(client.ordinal, cid)
            self.residency.forget(cid)
            self.residency.set(index, cid, resident)
        client.device, client.gpu_uuid = index, uuid
        self._reported = None
        actions = [Log(f"device {client}: {uuid} (its device {client.ordinal}) is device "
                       f"{index}")]
        dev = self.devices.get(index)
        if dev is not None:  # its memory (and maybe the capacity) now count on that device
            actions += self._settle(dev, now)
        return actions

    def _device_of(self, uuid: str, ordinal: int) -> int:
        """The scheduler's index for a GPU: NVML's index for its UUID; for a UUID NVML does not
        know, the index it was given when first seen (the client's ordinal if no other GPU has
        it, else the lowest free one); without a UUID, the client's ordinal as it is."""
        if not uuid:
            return ordinal
        if uuid in self.nvml_uuids:
            return self.nvml_uuids[uuid]
        if uuid not in self.uuid_devices:
            taken = {*self.nvml_uuids.values(), *self.uuid_devices.values()}
            free = ordinal if ordinal not in taken else \
                next((i for i in range(MAX_DEVICES) if i not in taken), None)
            if free is None:  # every index given away (a client inventing UUIDs): as before
                return ordinal
            self.uuid_devices[uuid] = free
        return self.uuid_devices[uuid]

    def request_lock(self, cid: int, device: int, now: float) -> list:
        client = self.clients.get(cid)
        if client is None:
            return []
        if device >= MAX_DEVICES:
            return [_device_out_of_range(cid, device)]
        if not client.may_name(device):
            return [_too_many_devices(cid, device)]
        ordinal, device = device, client.scheduler_device(device)
        if device is None:
            return [Close(cid, f"device {ordinal}: only the device named in REGISTER can be "
                               "locked by a client whose GPU numbering is its own",
                          p.ErrorCode.PROTOCOL)]
        if self.mode is p.Mode.OFF:
            return [Log(f"request from {client} for device {device} ignored: mode off needs "
                        "no lock", debug=True)]
        dev = self.devices.setdefault(device, Device(device))
        if cid in dev.holders or cid in dev.waiters:
            return [Log(f"repeated request from {client} for device {device}", debug=True)]
        dev.waiters[cid] = Wait(now, queued=False)
        log = Log(f"request {client}: device {device}")
        actions = self._settle(dev, now)
        if cid in dev.waiters:  # not granted at once: it waits behind someone
            dev.waiters[cid].queued = True
            client.waits += 1
            log = Log(f"{log.text}, {len(dev.waiters)} waiting")
        return [log] + actions

    def lock_released(self, cid: int, device: int, reason: int, now: float) -> list:
        client = self.clients.get(cid)
        if client is None:
            return []
        device = client.scheduler_device(device)
        dev = self.devices.get(device)
        if dev is None or cid not in dev.holders:
            return [Log(f"release from {client} for device {device} ignored: it holds no lock "
                        "there", debug=True)]
        words = RELEASE_WORDS.get(reason, f"with reason {reason}")
        held = self._end_hold(dev, cid, now)
        return [Log(f"release {client}: device {device} {words}, held {held:.3f} s")] + \
            self._settle(dev, now)

    def mem_report(self, cid: int, device: int, allocated: int, total: int, now: float) -> list:
        client = self.clients.get(cid)
        if client is None:
            return []
        if device >= MAX_DEVICES:
            return [_device_out_of_range(cid, device)]
        if not client.may_name(device):
            return [_too_many_devices(cid, device)]
        ordinal, device = device, client.scheduler_device(device)
        if device is None:
            return [Log(f"memory {client} on its device {ordinal} not counted: which GPU that "
                        "is, only its registered device says", debug=True)]
        client.allocated[device] = allocated
        if total and client.device_total.get(device) != total:
            client.device_total[device] = total
            self._reported = None
        dev = self.devices.get(device)
        if self.mode is p.Mode.OFF or (dev is not None and cid in dev.holders):
            self.residency.set(device, cid, allocated)  # it runs: its memory is on the device
        else:
            self.residency.shrink_to(device, cid, allocated)
        actions = [Log(f"memory {client}: device {device} {allocated} bytes allocated",
                       debug=True)]
        if dev is not None:  # a holder grew or shrank, or the capacity is known now
            actions += self._settle(dev, now)
        return actions

    def moved(self, cid: int, device: int, flags: int, size: int, elapsed_us: int,
              now: float) -> list:
        """A client reports memory it moved, or is moving (progress), between a device and the
        host. What it claims is believed only up to what it has there."""
        client = self.clients.get(cid)
        if client is None:
            return []
        if device >= MAX_DEVICES:
            return [_device_out_of_range(cid, device)]
        ordinal, device = device, client.scheduler_device(device)
        if device is None:
            return [Log(f"move by {client} on its device {ordinal} not counted: which GPU that "
                        "is, only its registered device says", debug=True)]
        to_host, done = bool(flags & p.MOVED_TO_HOST), bool(flags & p.MOVED_DONE)
        size = min(size, client.allocated.get(device, 0))
        dev = self.devices.get(device)
        if not done:
            hold = dev.holders.get(cid) if dev else None
            if hold is not None and hold.dropped_at is not None:
                hold.revoke_at = max(hold.revoke_at, now + self.grace_s)
            return [Log(f"moving {client}: device {device}, {size} bytes to the "
                        f"{'host' if to_host else 'device'} so far", debug=True)]
        seconds = elapsed_us / 1e6
        if to_host:
            self.residency.moved_out(device, cid, size)
        self.links.setdefault(device, Link()).record(to_host, size, seconds)
        rate = f" ({size / seconds / GB:.1f} GB/s)" if seconds > 0 else ""
        failed = ", cut short: the driver refused the rest" if flags & p.MOVED_FAILED else ""
        actions = [Log(f"moved {client}: device {device}, {size} bytes to the "
                       f"{'host' if to_host else 'device'} in {seconds:.3f} s{rate}{failed}")]
        if dev is not None and dev.evictions.pop(cid, None) is not None:
            actions += self._settle(dev, now)
        return actions

    def disconnect(self, cid: int, now: float) -> list:
        client = self.clients.pop(cid, None)
        if client is None:
            return []
        self.residency.forget(cid)
        self._reported = None
        held, waited = [], []
        for dev in self.devices.values():
            dev.evictions.pop(cid, None)  # its memory left with it
            if cid in dev.holders:
                self._end_hold(dev, cid, now, client)
                held.append(dev.index)
            elif cid in dev.waiters:
                self._end_wait(dev, cid, now, client)
                waited.append(dev.index)
        what = "".join([f", held device {_listed(held)}" if held else "",
                        f", was waiting for device {_listed(waited)}" if waited else ""])
        actions = [Log(f"disconnect {client}{what}")]
        # Every device: its reported capacity may have left with this client.
        for dev in list(self.devices.values()):
            actions += self._settle(dev, now)
        return actions

    def configure(self, now: float, tq: int | None = None, mode: p.Mode | None = None) -> list:
        """Apply validated settings at once; the caller has checked both values already."""
        old_tq, old_mode = self.tq, self.mode
        self.tq = old_tq if tq is None else tq
        self.mode = old_mode if mode is None else mode
        if (self.tq, self.mode) == (old_tq, old_mode):
            return [Log(f"settings unchanged: tq {self.tq} s, anti-thrash {self.mode.label}")]
        actions = [Log(f"settings: tq {old_tq} -> {self.tq} s, anti-thrash "
                       f"{old_mode.label} -> {self.mode.label}")]
        if self.mode is p.Mode.OFF:
            for dev in list(self.devices.values()):
                for cid in list(dev.holders):
                    self._end_hold(dev, cid, now)
                for cid in list(dev.waiters):
                    self._end_wait(dev, cid, now)
            self.devices.clear()
            for cid, client in self.clients.items():  # all run now, so all of it comes back
                for device, allocated in client.allocated.items():
                    self.residency.set(device, cid, allocated)
                for device in client.last_grant:  # and each runs beside the others
                    client.last_grant[device] = -1
        else:
            # A running quantum is measured against the new TQ; a drop already sent stands.
            for dev in self.devices.values():
                for hold in dev.holders.values():
                    if hold.dropped_at is None:
                        hold.quantum_end = hold.granted_at + self.tq
        actions += [Send(cid, p.SchedMode(self.mode, self.tq)) for cid in self.clients]
        for dev in list(self.devices.values()):
            actions += self._settle(dev, now)
        return actions

    def tick(self, now: float) -> list:
        """Fire every timer that is due at `now`."""
        actions = []
        for dev in list(self.devices.values()):
            for cid, hold in list(dev.holders.items()):
                if hold.dropped_at is not None and now >= hold.revoke_at:
                    actions += self._revoke(dev, cid, now)
            for cid, (deadline, size) in list(dev.evictions.items()):
                if now >= deadline:
                    del dev.evictions[cid]
                    self.residency.presume_gone(dev.index, cid, size)
                    actions.append(Log(f"evict {self.clients[cid]}: device {dev.index}, no "
                                       "answer in time; the grant goes ahead and page faults "
                                       "move the rest"))
            actions += self._settle(dev, now)
        return actions

    def next_deadline(self) -> float | None:
        """When `tick` next has something to do, or None when no timer runs."""
        due = []
        for dev in self.devices.values():
            for hold in dev.holders.values():
                if hold.dropped_at is not None:
                    due.append(hold.revoke_at)
                elif dev.waiters:
                    due.append(hold.quantum_end)
            due.extend(deadline for deadline, _ in dev.evictions.values())
        return min(due, default=None)

    # ----- queries --------------------------------------------------------------------------

    def state_of(self, cid: int) -> str:
        for dev in self.devices.values():
            if cid in dev.holders:
                return "holding"
        for dev in self.devices.values():
            if cid in dev.waiters:
                return "waiting"
        return "idle"

    def running_hold_time(self, cid: int, now: float) -> float:
        return sum(now - dev.holders[cid].granted_at
                   for dev in self.devices.values() if cid in dev.holders)

    def running_wait_time(self, cid: int, now: float) -> float:
        return sum(now - dev.waiters[cid].since
                   for dev in self.devices.values()
                   if cid in dev.waiters and dev.waiters[cid].queued)

    def capacity(self, device: int) -> tuple[int | None, str | None]:
        """The device's capacity in bytes as `auto` decides with it, and where it came from: the
        operator's limit where it is lower than (or stands in for) what the device holds."""
        if device in self.nvml_capacity:
            found, source = self.nvml_capacity[device], "nvml"
        else:
            reported = self._reported_total(device)
            found, source = (reported, "reported") if reported else (None, None)
        if self.capacity_limit is not None and (found is None or self.capacity_limit < found):
            return self.capacity_limit, "limit"
        return found, source

    def _reported_total(self, device: int) -> int:
        """The largest total a connected client reported for the device; remembered until a
        report or a departure may change it, since every grant asks."""
        if self._reported is None:
            self._reported = {}
            for client in self.clients.values():
                for index, total in client.device_total.items():
                    self._reported[index] = max(self._reported.get(index, 0), total)
        return self._reported.get(device, 0)

    def memory_of(self, cid: int, device: int) -> int:
        return self.clients[cid].allocated.get(device, 0)

    def holders_memory(self, device: int) -> int:
        dev = self.devices.get(device)
        return sum(self.memory_of(cid, device) for cid in dev.holders) if dev else 0

    # ----- rules ----------------------------------------------------------------------------

    def _budget(self, dev: Device) -> Budget:
        """What fits on the device now: memory in `auto`, a single holder in `on`."""
        capacity = self.capacity(dev.index)[0] if self.mode is p.Mode.AUTO else None
        return Budget(capacity, self.reserve)

    def _settle(self, dev: Device, now: float) -> list:
        """Bring the device in line with the rules: shrink the holders to a set that fits, grant
        whoever may hold now (once there is room for them), drop holders whose quantum is over
        while others wait, and tell holders how long an idle gap is worth keeping the lock."""
        if self.mode is p.Mode.OFF:
            return []
        budget = self._budget(dev)
        active = [(cid, self.memory_of(cid, dev.index))
                  for cid, hold in dev.holders.items() if hold.dropped_at is None]
        keep = set(kept(budget, active))
        actions = []
        for cid, _ in active:
            if cid not in keep:
                actions += self._drop(dev, cid, now, self._why_shrunk(dev, budget))
        # A generator: admission usually stops at the head, so a long queue is not walked.
        waiting = (Waiting(cid, self.memory_of(cid, dev.index), now - wait.since)
                   for cid, wait in dev.waiters.items())
        holding = [self.memory_of(cid, dev.index) for cid in dev.holders]
        chosen = admitted(budget, holding, waiting, patience=self.tq)  # before dev.waiters changes
        ready = self._with_room(dev, chosen, now, actions)
        shared = len(dev.holders) + len(ready) > 1
        for cid in ready:
            actions += self._grant(dev, cid, now, shared)
        if dev.waiters:
            for cid, hold in dev.holders.items():
                if hold.dropped_at is None and now >= hold.quantum_end:
                    actions += self._drop(dev, cid, now,
                                          f"quantum over, {len(dev.waiters)} waiting")
        actions += self._idle_hints(dev)
        if dev.idle:
            del self.devices[dev.index]
        return actions

    def _why_shrunk(self, dev: Device, budget: Budget) -> str:
        if self.mode is p.Mode.ON:
            return "mode on allows one holder"
        if budget.capacity is None:
            return "capacity unknown, so one holder"
        return (f"holders no longer fit in {_mib(budget.capacity)} (allocated "
                f"{_mib(self.holders_memory(dev.index))}, {_mib(self.reserve)} reserve each)")

    # ----- moving memory -----------------------------------------------------------------------

    def link(self, device: int) -> Link:
        return self.links.get(device) or Link()

    def _to_fetch(self, device: int, cid: int) -> int:
        """Bytes a client must bring back to the device before it runs."""
        return max(self.memory_of(cid, device) - self.residency.of(device, cid), 0)

    def _room_for(self, dev: Device, incoming: list[int], holders_after: int) -> int:
        """Bytes that must leave the device so that `incoming` clients' memory comes back beside
        everything there now, with a context reserve for each of `holders_after` holders."""
        fetch = sum(self._to_fetch(dev.index, cid) for cid in incoming)
        return room_to_make(self.capacity(dev.index)[0], self.residency.total(dev.index), fetch,
                            holders_after, self.reserve)

    def _with_room(self, dev: Device, chosen: list[int], now: float, actions: list) -> list[int]:
        """The waiters chosen for a grant, once there is room for all of their memory; none while
        clients asked to move memory out have not answered. Room is asked for once per waiter,
        of clients that do not hold the device: a grant never waits twice for it."""
        if dev.evictions or not chosen:
            return [] if dev.evictions else chosen
        needed = self._room_for(dev, chosen, len(dev.holders) + len(chosen))
        if needed == 0 or all(dev.waiters[cid].room_asked for cid in chosen):
            return chosen
        for cid in chosen:
            dev.waiters[cid].room_asked = True
        plan = take(needed, self._evictable(dev, exclude=set(chosen)))
        actions += self._evict(dev, plan, self.clients[chosen[0]], now)
        return [] if dev.evictions else chosen

    def _evict(self, dev: Device, plan: list[tuple[int, int]], beneficiary: Client,
               now: float) -> list:
        """Ask clients that do not hold the device to move memory out, and wait for them; a
        revoked client, which did not even drain in time, is asked but not waited for: its bytes
        are taken as gone, as the driver's page faults will move them."""
        actions = []
        link = self.link(dev.index)
        for victim, size in plan:
            client = self.clients[victim]
            if client.revoked:
                self.residency.presume_gone(dev.index, victim, size)
            else:
                dev.evictions[victim] = (now + self.grace_s + link.to_host.seconds(size), size)
            actions += [Send(victim, p.Evict(client.own_ordinal(dev.index), 0, size)),
                        Log(f"evict {client}: device {dev.index}, {_mib(size)} to the host to "
                            f"make room for {beneficiary}")]
        return actions

    def _evictable(self, dev: Device, exclude: set[int]) -> list[tuple[int, int]]:
        """Clients with memory on the device that may be asked to move it out now, in the order
        they are asked: those not waiting for it before those waiting (the last in the queue
        first, as it runs last), largest first within each."""
        place = {cid: i for i, cid in enumerate(dev.waiters)}  # not waiting: ahead of them all
        candidates = [(cid, size) for cid, size in self.residency.on(dev.index).items()
                      if cid not in dev.holders and cid not in exclude]
        return sorted(candidates, key=lambda item: (-place.get(item[0], len(place)), -item[1]))

    def _evict_on_drop(self, dev: Device, cid: int) -> int:
        """What a holder being dropped moves out as it releases: the room the head waiter (or, with
        nobody waiting, the holders that stay) needs, as far as its own memory there goes."""
        staying = sum(1 for h, hold in dev.holders.items()
                      if hold.dropped_at is None and h != cid)
        incoming = list(dev.waiters)[:1]
        needed = self._room_for(dev, incoming, staying + len(incoming))
        return min(needed, self.residency.of(dev.index, cid))

    def switch_seconds(self, device: int) -> float:
        """What handing the device to its head waiter now would cost in moves: the room it
        needs, moved out now and back in when the holder returns (the waiter's own memory comes
        back whenever it runs, so that is no cost of switching early); 0 with nobody waiting."""
        dev = self.devices.get(device)
        head = next(iter(dev.waiters), None) if dev else None
        if head is None:
            return 0.0
        out = self._room_for(dev, [head], len(dev.holders))
        return self.link(device).switch_seconds(out, out)

    def _idle_hints(self, dev: Device) -> list:
        """IDLE_HINT for each holder whose advice changed: how long to keep the lock through an
        idle gap, from what handing it to the head waiter would move."""
        actions = []
        hint = idle_release_ms(self.switch_seconds(dev.index), self.tq)
        for cid, hold in dev.holders.items():
            if hold.dropped_at is not None:
                continue
            if hint != hold.idle_hint_ms:
                hold.idle_hint_ms = hint
                actions.append(Send(cid, p.IdleHint(self.clients[cid].own_ordinal(dev.index),
                                                    hint)))
        return actions

    # ----- lock changes ------------------------------------------------------------------------

    def _drop(self, dev: Device, cid: int, now: float, why: str) -> list:
        hold = dev.holders[cid]
        evict = self._evict_on_drop(dev, cid)
        hold.dropped_at = now
        hold.revoke_at = now + self.grace_s + self.link(dev.index).to_host.seconds(evict)
        ordinal = self.clients[cid].own_ordinal(dev.index)
        return [Send(cid, p.DropLock(ordinal, 0, evict)),
                Log(f"drop {self.clients[cid]}: device {dev.index} {why}"
                    f"{f', evict {_mib(evict)} to the host' if evict else ''}")]

    def _grant(self, dev: Device, cid: int, now: float, shared: bool) -> list:
        client = self.clients[cid]
        wait = dev.waiters[cid]
        waited = self._end_wait(dev, cid, now)
        dev.holders[cid] = Hold(granted_at=now, quantum_end=now + self.tq)
        client.revoked = False
        number = self.grants[dev.index] = self.grants.get(dev.index, 0) + 1
        last = client.last_grant.get(dev.index)
        client.last_grant[dev.index] = number
        others_ran = last is not None and last != number - 1
        self.residency.set(dev.index, cid, self.memory_of(cid, dev.index))  # all of it comes back
        flags = (p.GRANT_AFTER_WAIT if wait.queued else 0) | (p.GRANT_SHARED if shared else 0) | \
            (p.GRANT_OTHERS_RAN if others_ran else 0)
        after = f" after waiting {waited:.3f} s" if wait.queued else ""
        beside = f", shared ({_mib(self.memory_of(cid, dev.index))} allocated)" if shared else ""
        return [Send(cid, p.LockGranted(client.own_ordinal(dev.index), flags, self.tq * 1000)),
                Log(f"grant {client}: device {dev.index}{after}{beside}")]

    def _revoke(self, dev: Device, cid: int, now: float) -> list:
        client = self.clients[cid]
        held = self._end_hold(dev, cid, now)
        client.revocations += 1
        client.revoked = True
        self.revocations += 1
        return [Send(cid, p.LockRevoked(client.own_ordinal(dev.index))),
                Log(f"revoke {client}: device {dev.index}, no release within "
                    f"{self.grace_s * 1000:.0f} ms of the drop (held {held:.3f} s)")]

    def _end_hold(self, dev: Device, cid: int, now: float, client: Client | None = None) -> float:
        held = now - dev.holders.pop(cid).granted_at
        (client or self.clients[cid]).hold_time += held
        return held

    def _end_wait(self, dev: Device, cid: int, now: float, client: Client | None = None) -> float:
        wait = dev.waiters.pop(cid)
        waited = now - wait.since if wait.queued else 0.0
        (client or self.clients[cid]).wait_time += waited
        return waited
