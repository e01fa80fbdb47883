"""The scheduler's rules as a pure state machine, in the sans-IO style of h11.

No sockets, no clock, no Trio: every event method takes the current time (`now`, seconds on any
monotonic clock) and returns a list of actions (see actions.py) for the shell to carry out.
`tick(now)` fires the timers and `next_deadline()` says when the next one is due, so a test can
drive every rule with a fake clock.

Rules (docs/protocol.md): one lock per device, granted first come first served for a
time quantum (TQ). When the quantum is over and someone waits, the holder gets DROP_LOCK; if it
does not answer with LOCK_RELEASED within the grace period it is revoked and the next waiter is
granted. Nobody waiting means no drop. In mode `off` no lock exists at all. A device is a GPU as
the scheduler numbers them, whatever each client calls it (device_identity.py).

Mode `auto` lets several clients hold one device's lock while their memory fits
(admission.py does the arithmetic, capacity.py keeps the capacities):

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

from collections.abc import Iterable

from . import protocol as p
from .actions import Close, Log, Send
from .admission import Budget, Waiting, admitted, kept
from .capacity import Capacity
from .cost import GB, Link, idle_release_ms, room_to_make
from .device_identity import MAX_DEVICES, GpuIndices, Numbering, out_of_range, too_many_devices
from .residency import Residency, eviction_order, take
from .snapshot import Snapshot, snapshot_of
from .state import Client, Device, Hold, Registration, Wait

RELEASE_WORDS = {p.ReleaseReason.DROPPED: "after drop", p.ReleaseReason.IDLE: "early (idle)",
                 p.ReleaseReason.REVOKED: "after revocation"}


def printable(text: str, limit: int = 256) -> str:
    """Client-supplied text made safe for one log line and for status."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:limit])


def _listed(indices: list[int]) -> str:
    return ", ".join(map(str, indices))


def _mib(count: int) -> str:
    return f"{count / (1 << 20):.0f} MiB"


class Policy:
    def __init__(self, tq: int, mode: p.Mode, grace_s: float, max_clients: int,
                 reserve_bytes: int = 512 << 20, nvml_capacity: dict[int, int] | None = None,
                 capacity_limit: int | None = None, nvml_uuids: dict[str, int] | None = None):
        self.tq = tq
        self.mode = mode
        self.grace_s = grace_s
        self.max_clients = max_clients
        self.reserve = reserve_bytes  # per holder, for its CUDA context (mode auto)
        self.capacity = Capacity(nvml_capacity, capacity_limit)
        self.gpu_indices = GpuIndices(nvml_uuids)
        self.clients: dict[int, Client] = {}
        self.devices: dict[int, Device] = {}  # only devices with a holder or a waiter
        self.revocations = 0
        self.residency = Residency()
        self.links: dict[int, Link] = {}  # device -> its measured moves, kept while we run
        self.grants: dict[int, int] = {}  # device -> grants made on it so far
        # device -> the client whose hold there ended last: with nobody waiting, the one most
        # likely to ask next, so what handing the device to it would cost is the switch cost.
        self.last_holder: dict[int, int] = {}

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
            return [out_of_range(cid, message.device)]
        who = Registration(cid, pid, uid, gid, printable(message.process_name, 64),
                           printable(message.pod_namespace, 64), printable(message.pod_name),
                           message.flags, wall)
        client = self.clients[cid] = Client(who, Numbering.registered(message.device))
        pod = f", pod {who.namespace}/{who.pod}" if who.pod else ""
        return [Send(cid, p.Registered(cid, self.mode, self.tq)),
                Log(f"register {client}: uid {uid}, device {client.numbering.device}{pod}")]

    def device_uuid(self, cid: int, device: int, uuid: str, now: float) -> list:
        """The client says which physical GPU its registered device is: from now on it is keyed
        by that GPU, whatever its own numbering (CUDA_VISIBLE_DEVICES)."""
        client = self.clients.get(cid)
        if client is None:
            return []
        uuid, numbering = printable(uuid, 48), client.numbering
        if not numbering.takes_uuid(device, uuid):
            return [Log(f"GPU UUID from {client} for its device {device} ignored: only one, for "
                        "the device it registered", debug=True)]
        if any(cid in dev.holders or cid in dev.waiters for dev in self.devices.values()):
            return [Log(f"GPU UUID from {client} ignored: it came after a lock request, so the "
                        f"client stays on device {numbering.device}")]
        ordinal, index = numbering.ordinal, self.gpu_indices.index_of(uuid, numbering.ordinal)
        if index != ordinal:
            # Its other devices' numbers no longer mean ours: keep only the registered one.
            client.allocated = {index: client.allocated.get(ordinal, 0)}
            self.capacity.renumber(cid, ordinal, index)
            resident = self.residency.of(ordinal, cid)
            self.residency.forget(cid)
            self.residency.set(index, cid, resident)
        numbering.device, numbering.gpu_uuid = index, uuid
        actions = [Log(f"device {client}: {uuid} (its device {ordinal}) is device {index}")]
        dev = self.devices.get(index)
        if dev is not None:  # its memory (and maybe the capacity) now count on that device
            actions += self._settle(dev, now)
        return actions

    def request_lock(self, cid: int, device: int, now: float) -> list:
        client = self.clients.get(cid)
        if client is None:
            return []
        if device >= MAX_DEVICES:
            return [out_of_range(cid, device)]
        if not client.numbering.may_name(device):
            return [too_many_devices(cid, device)]
        ordinal, device = device, client.numbering.scheduler_device(device)
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
        device = client.numbering.scheduler_device(device)
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
            return [out_of_range(cid, device)]
        if not client.numbering.may_name(device):
            return [too_many_devices(cid, device)]
        ordinal, device = device, client.numbering.scheduler_device(device)
        if device is None:
            return [Log(f"memory {client} on its device {ordinal} not counted: which GPU that "
                        "is, only its registered device says", debug=True)]
        client.allocated[device] = allocated
        self.capacity.report(cid, device, total)
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
            return [out_of_range(cid, device)]
        ordinal, device = device, client.numbering.scheduler_device(device)
        if device is None:
            return [Log(f"move by {client} on its device {ordinal} not counted: which GPU that "
                        "is, only its registered device says", debug=True)]
        to_host, done = bool(flags & p.MOVED_TO_HOST), bool(flags & p.MOVED_DONE)
        size = min(size, client.allocated.get(device, 0))
        dev = self.devices.get(device)
        hold = dev.holders.get(cid) if dev else None
        if hold is not None and hold.dropped_at is None and not to_host:
            # Its memory coming back is no work done: the quantum runs from when it is back, so
            # that a move back longer than the quantum cannot leave every turn empty; at most
            # once more, so that progress frames cannot hold the device.
            hold.quantum_end = min(max(hold.quantum_end, now + self.tq),
                                   hold.granted_at + 2 * self.tq)
        if not done:
            if hold is not None and hold.dropped_at is not None:
                hold.revoke_at = max(hold.revoke_at, now + self.grace_s)
            return [Log(f"moving {client}: device {device}, {size} bytes to the "
                        f"{'host' if to_host else 'device'} so far", debug=True)]
        seconds = elapsed_us / 1e6
        if to_host:
            self.residency.moved_out(device, cid, size)
        if size > 0:  # clamped to its memory there: a client names no device it has none on
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
        self.capacity.forget(cid)
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

    def snapshot(self, now: float, devices: Iterable[int] = ()) -> Snapshot:
        """The state as plain data, for status and anything else that reports on it; with an
        entry for each of `devices` (the GPUs NVML lists) whether anyone uses it or not."""
        return snapshot_of(self, now, devices)

    def memory_of(self, cid: int, device: int) -> int:
        return self.clients[cid].allocated.get(device, 0)

    def holders_memory(self, device: int) -> int:
        dev = self.devices.get(device)
        return sum(self.memory_of(cid, device) for cid in dev.holders) if dev else 0

    # ----- rules ----------------------------------------------------------------------------

    def _budget(self, dev: Device) -> Budget:
        """What fits on the device now: memory in `auto`, a single holder in `on`."""
        capacity = self.capacity.of(dev.index)[0] if self.mode is p.Mode.AUTO else None
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

    def _link(self, device: int) -> Link:
        return self.links.get(device) or Link()

    def _to_fetch(self, device: int, cid: int) -> int:
        """Bytes a client must bring back to the device before it runs."""
        return max(self.memory_of(cid, device) - self.residency.of(device, cid), 0)

    def _room_for(self, dev: Device, incoming: list[int], holders_after: int) -> int:
        """Bytes that must leave the device so that `incoming` clients' memory comes back beside
        everything there now, with a context reserve for each of `holders_after` holders."""
        fetch = sum(self._to_fetch(dev.index, cid) for cid in incoming)
        return room_to_make(self.capacity.of(dev.index)[0], self.residency.total(dev.index), fetch,
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
        link = self._link(dev.index)
        for victim, size in plan:
            client = self.clients[victim]
            if client.revoked:
                self.residency.presume_gone(dev.index, victim, size)
            else:
                dev.evictions[victim] = (now + self.grace_s + link.to_host.seconds(size), size)
            actions += [Send(victim, p.Evict(client.numbering.own_ordinal(dev.index), 0, size)),
                        Log(f"evict {client}: device {dev.index}, {_mib(size)} to the host to "
                            f"make room for {beneficiary}")]
        return actions

    def _evictable(self, dev: Device, exclude: set[int]) -> list[tuple[int, int]]:
        """Clients with memory on the device that may be asked to move it out now (no holder,
        none of `exclude`), in the order they are asked."""
        candidates = {cid: size for cid, size in self.residency.on(dev.index).items()
                      if cid not in dev.holders and cid not in exclude}
        return eviction_order(candidates, list(dev.waiters))

    def _evict_on_drop(self, dev: Device, cid: int) -> int:
        """What a holder being dropped moves out as it releases: the room the head waiter (or, with
        nobody waiting, the holders that stay) needs, as far as its own memory there goes."""
        staying = sum(1 for h, hold in dev.holders.items()
                      if hold.dropped_at is None and h != cid)
        incoming = list(dev.waiters)[:1]
        needed = self._room_for(dev, incoming, staying + len(incoming))
        return min(needed, self.residency.of(dev.index, cid))

    def switch_seconds(self, device: int) -> float:
        """What handing the device to the next client now would cost in moves: the room it
        needs, moved out now and back in when the holder returns (its own memory comes back
        whenever it runs, so that is no cost of switching early). The next client is the head
        waiter or, with nobody waiting, the last other holder that still has memory there: a
        holder that releases early with nobody waiting is evicted as soon as that one asks."""
        dev = self.devices.get(device)
        if dev is None:
            return 0.0
        head = next(iter(dev.waiters), None)
        if head is None:
            last = self.last_holder.get(device)
            client = self.clients.get(last) if last is not None else None
            if client is None or last in dev.holders or not client.allocated.get(device):
                return 0.0
            head = last
        out = self._room_for(dev, [head], len(dev.holders))
        return self._link(device).switch_seconds(out, out)

    def _idle_hints(self, dev: Device) -> list:
        """IDLE_HINT for each holder whose advice changed: how long to keep the lock through an
        idle gap, from what handing it to the head waiter would move, and what its drop would
        ask it to move out (so that it can get ready for that while it works)."""
        actions = []
        hint = idle_release_ms(self.switch_seconds(dev.index), self.tq)
        for cid, hold in dev.holders.items():
            if hold.dropped_at is not None:
                continue
            evict = self._evict_on_drop(dev, cid) if dev.waiters else 0
            if (hint, evict) != (hold.idle_hint_ms, hold.hint_evict_bytes):
                hold.idle_hint_ms, hold.hint_evict_bytes = hint, evict
                ordinal = self.clients[cid].numbering.own_ordinal(dev.index)
                actions.append(Send(cid, p.IdleHint(ordinal, hint, evict)))
        return actions

    # ----- lock changes ------------------------------------------------------------------------

    def _drop(self, dev: Device, cid: int, now: float, why: str) -> list:
        hold = dev.holders[cid]
        evict = self._evict_on_drop(dev, cid)
        hold.dropped_at = now
        hold.revoke_at = now + self.grace_s + self._link(dev.index).to_host.seconds(evict)
        ordinal = self.clients[cid].numbering.own_ordinal(dev.index)
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
        ordinal = client.numbering.own_ordinal(dev.index)
        return [Send(cid, p.LockGranted(ordinal, flags, self.tq * 1000)),
                Log(f"grant {client}: device {dev.index}{after}{beside}")]

    def _revoke(self, dev: Device, cid: int, now: float) -> list:
        client = self.clients[cid]
        hold = dev.holders[cid]
        waited = now - (hold.dropped_at if hold.dropped_at is not None else now)
        held = self._end_hold(dev, cid, now)
        client.revocations += 1
        client.revoked = True
        self.revocations += 1
        return [Send(cid, p.LockRevoked(client.numbering.own_ordinal(dev.index))),
                Log(f"revoke {client}: device {dev.index}, no release {waited * 1000:.0f} ms after "
                    f"the drop (grace {self.grace_s * 1000:.0f} ms, plus its move's time, and "
                    f"no progress reported since; held {held:.3f} s)")]

    def _end_hold(self, dev: Device, cid: int, now: float, client: Client | None = None) -> float:
        self.last_holder[dev.index] = cid
        held = now - dev.holders.pop(cid).granted_at
        (client or self.clients[cid]).hold_time += held
        return held

    def _end_wait(self, dev: Device, cid: int, now: float, client: Client | None = None) -> float:
        wait = dev.waiters.pop(cid)
        waited = now - wait.since if wait.queued else 0.0
        (client or self.clients[cid]).wait_time += waited
        return waited
