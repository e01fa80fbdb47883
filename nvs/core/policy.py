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

Moving memory (docs/protocol.md, "Moving memory"; room_rules.py carries it out, cost.py does the
arithmetic, residency.py keeps the estimate of where each client's memory is):

- A grant that needs room waits for it: the outgoing holder's DROP_LOCK names the bytes to move
  out, and what is still missing when the lock is free is asked of clients that do not hold it
  (EVICT), once per grant; the grant follows their MOVED reports or their deadlines.
- A holder that is moving memory is given time for it: grace plus bytes / measured rate, pushed
  on by each progress report. Revocation is for a holder that neither drains nor moves.
- A grant tells a client when another ran since its last grant while their memory overfilled
  the device (GRANT_OTHERS_RAN), so that it brings its memory back in bulk; and a holder whose
  handoff would swap memory is told to keep the lock through idle gaps shorter than twice that
  swap (IDLE_HINT).

Idle gaps (gap_rules.py carries them out, gaps.py keeps each client's gap estimate): a holder
whose gaps outlast lending the device to the waiter and taking it back is told to let go soon
after its work; its early release lends the device until its quantum would have ended, and when
it asks again by then, whoever holds on its loan drops at once (docs/scheduling.md).

Shares (share_rules.py carries them out, shares.py does the arithmetic, usage.py keeps each
client's decayed lock time, terms.py says what a client is allowed; the shell gives the rules
that set the terms):

- A waiter whose weighted usage is clearly below a holder's when it asks goes to the front of the
  queue, and the holder is dropped once it has run a minimum slice (longer when the switch moves
  memory). It passes those ahead of it only while each of them has waited less than a TQ, so a
  waiter is passed only during its first TQ of waiting, and it is granted after at most one
  turn per client ahead of it when it asked or that passed it since, plus the holder's: each
  turn at most a TQ plus the drain, grace period and moves that end it (docs/scheduling.md).
- Under contention a holder's quantum is TQ times its weight over the heaviest contender's.
- A client with a gpu_limit is dropped when its usage reaches its level, with or without
  waiters, and waits until it has fallen enough for another turn.
- A memory limit goes to the client in LIMITS, before REGISTERED and whenever it changes.

Budgets (budgets.py): the programs of one Kubernetes container share the units its kubelet
allocated: one memory limit (LIMITS also says what the others use), one weight, and the
optional cap. A REG_VIEW_ONLY registration gets its LIMITS and REGISTERED and is kept apart
(`viewers`), so that nothing else sees it.

Gangs: gang_rules.py states and carries out their rules; gangs.py keeps who belongs to which.

Copies between devices: a holder that waits for a device of a higher index keeping what it
holds (REQUEST_KEEPING) keeps its lower devices past their turns until it is granted
(docs/scheduling.md).

Who decides: each rule above is a stage of one decision pipeline, listed in precedence order in
pipeline.py (gangs, memory, room, copies, gaps, quantum, shares, limits), each with its own
state; MPS and budgets are parts beside it (mps_rules, budget_rules). This class keeps the
events, asks the stages, and applies their decisions: grants, drops and the queue's placements,
each naming the stage that made it.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from .. import protocol as p
from .model.actions import Close, Log, Send
from .model.container import CAP_OFF, NAMED_BY_NODE, NAMED_BY_PROGRAM, NodeIdentity
from .model.device_identity import (
    MAX_DEVICES,
    GpuIndices,
    Numbering,
    out_of_range,
    too_many_devices,
)
from .model.decision import Decision
from .model.state import Client, Device, Hold, Registration, Wait
from .model.terms import Identity, Terms, no_rules
from .model.text import (
    GONE,
    IDLE,
    MEMORY,
    MODE,
    RELEASED,
    REVOKED,
    listed,
    mib,
    printable,
)
from .model.stage import Stage
from .pipeline import DROP_DECISIONS, STAGES, Pipeline
from .rules.admission import Budget, Waiting, admitted, kept
from .rules.budgets import KUBELET_SOURCE, BudgetRules, node_names, said_otherwise
from .rules.capacity import Capacity, renumbered
from .rules.checks.claim_rules import ClaimRules
from .rules.checks.claims import Listing, Unregistered
from .rules.checks.throttle import QuickReturns, ThrottleRules
from .rules.cost import GB, LINK_CEILING_BPS, Link
from .rules.memory.credit import MoveCredit
from .rules.gang_rules import GangStage, with_gang
from .rules.gangs import DEFAULT_GANG_TIMEOUT_S
from .rules.gap_rules import GapStage
from .rules.gaps import Gaps, idle_waited_s
from .rules.mps_rules import MpsRules, mps_words
from .rules.memory.residency import Residency
from .rules.room_rules import RoomStage
from .rules.share_rules import LimitStage, ShareStage
from .rules.memory.staging_budget import HostMemory, StagingBudget
from .rules.usage import Usage
from .snapshot import ClientSnapshot, DeviceSnapshot, GangSnapshot, Snapshot
from .tallies import Series, Tallies, series_of

# How long a holder runs before a client under its share of GPU time may take the lock from it:
# long enough that a switch costs little beside the work, short enough for an interactive wait.
DEFAULT_MIN_SLICE_MS = 300
# A move whose progress reports show no new bytes for this long is taken as stuck in the driver.
STALLED_S = 10.0
RELEASE_WORDS = {p.ReleaseReason.DROPPED: "after drop", p.ReleaseReason.IDLE: "early (idle)",
                 p.ReleaseReason.REVOKED: "after revocation"}


def _terms_words(terms: Terms) -> str:
    """The terms that differ from the defaults, for a log line."""
    words = [f"weight {terms.weight:g}" if terms.weight != 1 else "",
             f"gpu limit {terms.gpu_limit:g}" if terms.gpu_limit is not None else "",
             f"memory limit {mib(terms.memory_limit)}" if terms.memory_limit is not None else "",
             f"sm share {terms.sm_share}%" if terms.sm_share is not None else "",
             "mps false" if not terms.mps else "",
             "mps priority low" if terms.mps_priority is p.MpsPriority.LOW else ""]
    return "".join(f", {word}" for word in words if word)


def _series(client: Client) -> Series:
    """Who the client counts as in the metrics (tallies.py)."""
    return series_of(client.registration, client.identity.label)


class Policy:
    def __init__(self, tq: int, mode: p.Mode, grace_s: float, max_clients: int,
                 reserve_bytes: int = 512 << 20, nvml_capacity: dict[int, int] | None = None,
                 capacity_limit: int | None = None, nvml_uuids: dict[str, int] | None = None,
                 rules: Callable[[Identity], Terms] = no_rules,
                 min_slice_ms: int = DEFAULT_MIN_SLICE_MS,
                 gang_timeout_s: float = DEFAULT_GANG_TIMEOUT_S, mps: bool = False,
                 link_priors: dict[int, float] | None = None, compute_cap: str = CAP_OFF,
                 staging_limit: int | None = None, stages: Sequence[type[Stage]] = STAGES):
        """`stages`: the decision pipeline's stages in precedence order (pipeline.py); only a
        test of that order gives others."""
        self.gang_timeout_s = gang_timeout_s
        self.pipeline = Pipeline(self, stages)
        # The stages that events and settling call on beyond the pipeline's questions.
        self.gap_rules = self.pipeline.of(GapStage)
        self.room_rules = self.pipeline.of(RoomStage)
        self.gang_rules = self.pipeline.of(GangStage)
        self.gangs = self.gang_rules.gangs  # read here for status and the timers
        self.share_rules = self.pipeline.of(ShareStage)
        self.limit_rules = self.pipeline.of(LimitStage)
        self.tq = tq
        self.min_slice_ms = min_slice_ms
        self.rules = rules
        self.usage = Usage()
        self.gaps = Gaps()  # how long each client's idle gaps last, to lend them (gaps.py)
        self.returns = QuickReturns()  # who takes the device back right after letting go
        self.mode = mode
        self.grace_s = grace_s
        self.max_clients = max_clients
        self.reserve = reserve_bytes  # per holder, for its CUDA context (mode auto)
        self.capacity = Capacity(nvml_capacity, capacity_limit)
        self.gpu_indices = GpuIndices(nvml_uuids)
        self.clients: dict[int, Client] = {}
        self.allocated = Counter()  # device -> what all the clients have allocated there
        self.users = Counter()  # device -> the clients with memory there, each with a context
        # device -> the grant count when all the clients' memory there last overfilled it
        # (_note_crowding)
        self.crowded_at: dict[int, int] = {}
        self.devices: dict[int, Device] = {}  # only devices with a holder or a waiter
        self.revocations = 0
        self.residency = Residency()
        # The host memory all programs' staging may take (staging_budget.py).
        self.staging = StagingBudget(staging_limit)
        self.credit = MoveCredit()  # the bytes of reported moves that may teach a rate
        self.links: dict[int, Link] = {}  # device -> its measured moves, kept while we run
        # device -> what its host link is expected to carry (NVML; cost.link_prior_bps)
        self.link_priors = dict(link_priors or {})
        self.grants: dict[int, int] = {}  # device -> grants made on it so far
        self.tallies = Tallies()  # what reports count besides: holds ended, waits, moves
        # device -> (client, why) of the hold there that ended last: with nobody waiting, that
        # client is the one most likely to ask next, so what handing the device to it would
        # cost is the switch cost; and status says why it ended.
        self.last_end: dict[int, tuple[int, str]] = {}
        self.last_drop: dict[int, Decision] = {}  # device -> the decision of its last drop
        # Beside the pipeline: who goes through MPS, and the budgets of containers' programs.
        self.mps_rules = MpsRules(self, enabled=mps)
        self.budget_rules = BudgetRules(self, compute_cap)
        # And the checks of what clients say: quick returns, memory reports against NVML.
        self.throttle_rules = ThrottleRules(self)
        self.claim_rules = ClaimRules(self)
        self.viewers: dict[int, Client] = {}  # REG_VIEW_ONLY registrations
        self.listing = Listing()  # NVML's processes of each GPU, as the shell last read them
        self.unregistered = Unregistered()  # GPU users that are no client (checks/claims.py)

    # ----- events -------------------------------------------------------------------------

    def gang(self, cid: int, message: p.Gang, now: float) -> list:
        """The client is one process of a distributed job: it joins the job's gang
        (rules/gang_rules.py)."""
        return self.gang_rules.join(cid, message, now)

    def register(self, cid: int, pid: int, uid: int, gid: int, message: p.Register,
                 now: float, wall: float, user: str = "", group: str = "",
                 node: NodeIdentity | None = None, named_by: str = NAMED_BY_PROGRAM) -> list:
        """`node`: the program's container as the node knows it; `named_by` says, without it,
        whether the program's own pod, namespace and label may select rules (model/container.py:
        only NAMED_BY_PROGRAM's may)."""
        if cid in self.clients or cid in self.viewers:
            return [Close(cid, f"client {cid} is already registered", p.ErrorCode.PROTOCOL)]
        # View-only registrations have slots of their own (the shell caps them).
        if not message.flags & p.REG_VIEW_ONLY and len(self.clients) >= self.max_clients:
            return [Log(f"refused pid {pid}: already {self.max_clients} clients (--max-clients)"),
                    Close(cid, f"the scheduler already serves its limit of {self.max_clients} "
                               "clients; try again later or raise --max-clients",
                          p.ErrorCode.TOO_MANY_CLIENTS)]
        if message.device >= MAX_DEVICES:
            return [out_of_range(cid, message.device)]
        if (unknown := message.unknown_flags()) is not None:
            return [Close(cid, unknown, p.ErrorCode.PROTOCOL)]
        said = (printable(message.pod_namespace, 64), printable(message.pod_name))
        named_by = NAMED_BY_NODE if node else named_by
        trusted = named_by == NAMED_BY_PROGRAM
        namespace, pod = node_names(node) if node else said if trusted else ("", "")
        who = Registration(cid, pid, uid, gid, printable(message.process_name, 64), namespace, pod,
                           message.flags, wall, printable(node.container, 64) if node else "")
        client = Client(who, Numbering.registered(message.device), node=node,
                        identity_from=named_by)
        client.identity = Identity(uid, user, gid, group, who.name, who.pod, who.namespace,
                                   printable(message.label, 64) if trusted else "",
                                   who.container)
        if message.flags & p.REG_VIEW_ONLY:
            return self.budget_rules.register_viewer(client, now)
        self.clients[cid] = client
        self.tallies.joined(_series(client))
        shared = self.budget_rules.join_budget(client, now)
        self._set_terms(client, self.budget_rules.terms_for(client))
        pod = f", pod {who.namespace}/{who.pod}" if who.pod else ""
        container = f", container {who.container} (from the node)" if node else ""
        label = f", label {client.identity.label}" if client.identity.label else ""
        limits = self.budget_rules.tell_limits(client, now, at_once=True)
        mps = self.mps_rules.through_mps(client)
        return limits + mps + [Send(cid, p.Registered(cid, self.mode, self.tq)),
                               Log(f"register {client}: uid {uid}, device "
                                   f"{client.numbering.device}{pod}{container}{label}"
                                   f"{_terms_words(client.terms)}"
                                   f"{mps_words(client)}")] + \
            said_otherwise(client, said, message.label) + shared

    def set_mps(self, pipe_directory: str | None) -> list:
        """The MPS control daemon answers at `pipe_directory` from now on, or (None) not at all
        (rules/mps_rules.py)."""
        return self.mps_rules.set_mps(pipe_directory)

    def mps_user(self) -> int | None:
        """The uid whose programs use the MPS server now, None when none does."""
        return self.mps_rules.mps_user()

    def node_named(self, cid: int, node: NodeIdentity, now: float) -> list:
        """The node named the container of a client that registered before it could
        (rules/budgets.py)."""
        return self.budget_rules.node_named(cid, node, now)

    def set_rules(self, rules: Callable[[Identity], Terms], now: float) -> list:
        """New configuration rules: every client's terms are worked out again, with its
        gemsharectl overrides still on top."""
        self.rules = rules
        actions = []
        for client in self.clients.values():
            actions += self._retake_terms(client, now)
        for viewer in self.viewers.values():
            viewer.terms = self.budget_rules.terms_for(viewer)
            actions += self.budget_rules.tell_limits(viewer, now, at_once=True)
        return actions

    def override(self, pid: int, values: dict, now: float, reset: bool = False) -> list:
        """gemsharectl's terms for the clients of process `pid` (validated by the caller), on
        top of the rules' for as long as they stay connected; `reset` drops earlier ones first.
        LookupError when no client has that pid."""
        clients = [client for client in self.clients.values()
                   if client.registration.pid == pid]
        if not clients:
            raise LookupError(f"no client of the scheduler has pid {pid}")
        actions = []
        for client in clients:
            if reset:
                client.overrides.clear()
            client.overrides.update(values)
            actions += self._retake_terms(client, now)
        return actions

    def device_uuid(self, cid: int, device: int, uuid: str, now: float) -> list:
        """The client says which physical GPU one of its devices is: from now on that device is
        keyed by that GPU, whatever the client's own numbering (CUDA_VISIBLE_DEVICES)."""
        client = self.clients.get(cid)
        if client is None:
            return []
        uuid, numbering = printable(uuid, 48), client.numbering
        # Ignored rather than refused: a UUID only helps, and a device past the bounds is one
        # the client cannot lock anyway.
        if device >= MAX_DEVICES or not numbering.may_name(device, count=False) or \
                not numbering.takes_uuid(device, uuid):
            return [Log(f"GPU UUID from {client} for its device {device} ignored: empty, not "
                        "its first for that device, or a device past the bounds", debug=True)]
        numbering.may_name(device)
        index = self.gpu_indices.index_of(uuid, device)
        busy = {dev.index for dev in self.devices.values()
                if cid in dev.holders or cid in dev.waiters}
        if busy & set(numbering.moves(device, index)):
            return [Log(f"GPU UUID from {client} for its device {device} ignored: it came after a "
                        "lock request that it would renumber, so the client keeps its numbers")]
        moves = numbering.learn(device, uuid, index)
        if moves:  # its memory, reported totals and residency follow the GPUs
            self._tally_memory(client, -1)
            client.allocated = renumbered(client.allocated, moves)
            client.reported = renumbered(client.reported, moves)
            self._tally_memory(client, 1)
            for moved_to in client.allocated:  # its memory may overfill the device it is on now
                self._note_crowding(moved_to)
            self.capacity.renumber(cid, moves)
            self.residency.renumber(cid, moves)
            self.credit.forget(cid)
            self.gaps.forget(cid)
        actions = [Log(f"device {client}: {uuid} (its device {device}) is device {index}")] + \
            self.budget_rules.budget_renumbered(client, now)
        for index_now in {index, *(new for new in moves.values() if new is not None)}:
            dev = self.devices.get(index_now)
            if dev is not None:  # its memory (and maybe the capacity) now count on that device
                actions += self._settle(dev, now)
        return actions

    def _naming(self, cid: int, device: int) -> tuple[Client | None, list]:
        """The client of a frame that names one of its devices, and [] when it may name that
        one; else (None, what answers the frame: nothing for a client gone or a view-only one,
        a close for a device past the bounds, also from a view-only one)."""
        client = self.clients.get(cid)
        if client is None:
            return None, [out_of_range(cid, device)] \
                if cid in self.viewers and device >= MAX_DEVICES else []
        if device >= MAX_DEVICES:
            return None, [out_of_range(cid, device)]
        if not client.numbering.may_name(device):
            return None, [too_many_devices(cid, device)]
        return client, []

    def request_lock(self, cid: int, device: int, now: float, keeping: bool = False) -> list:
        client, refused = self._naming(cid, device)
        if client is None:
            return refused
        ordinal, device = device, client.numbering.scheduler_device(device)
        if device is None:
            return [Close(cid, f"device {ordinal}: only the device named in REGISTER can be "
                               "locked by a client whose GPU numbering is its own",
                          p.ErrorCode.PROTOCOL)]
        if self.mode is p.Mode.OFF:
            return [Log(f"request from {client} for device {device} ignored: mode off needs "
                        "no lock", debug=True)]
        dev = self.devices.setdefault(device, Device(device))
        if cid in dev.waiters and keeping and not dev.waiters[cid].keeping:
            dev.waiters[cid].keeping = True  # another thread's work now keeps lower devices
            return [Log(f"request {client}: device {device}, keeping its lower devices")]
        if cid in dev.holders or cid in dev.waiters:
            return [Log(f"repeated request from {client} for device {device}", debug=True)]
        wait = dev.waiters[cid] = Wait(now, queued=False, keeping=keeping)
        throttled = self.throttle_rules.count_return(cid, device, now)
        self.gaps.requested(cid, device, now)
        placed = self.pipeline.arrive(dev, cid, now)
        wait.placed_by = placed.decision if placed else None
        actions = throttled + (placed.actions if placed else [])
        actions += self.gang_rules.outgrows_turn(cid, dev, now) + self._settle(dev, now)
        waiting = ""
        if cid in dev.waiters:  # not granted at once: it waits behind someone
            wait.queued = True
            client.waits += 1
            waiting = f", {len(dev.waiters)} waiting"
            if placed is None:  # one placed on arrival (back to a loan) has its place already
                placed = self.pipeline.queue(dev, cid, now)
                actions += placed.actions if placed else []
                wait.placed_by = placed.decision if placed else None
        words = placed.words if placed else ""
        if cid in dev.waiters:
            words += self.pipeline.holds_back(dev, cid, now).logged()
        return [Log(f"request {client}: device {device}{waiting}{words}")] + actions

    def lock_released(self, cid: int, device: int, reason: int, now: float,
                      idle_us: int = 0) -> list:
        """`idle_us`: with an early release, how long the client says the device had been idle
        (0: not said; the hint it was given stands in)."""
        client = self.clients.get(cid)
        if device >= MAX_DEVICES and (client is not None or cid in self.viewers):
            return [out_of_range(cid, device)]
        if client is None:
            return []
        device = client.numbering.scheduler_device(device)
        dev = self.devices.get(device)
        if dev is None or cid not in dev.holders:
            return [Log(f"release from {client} for device {device} ignored: it holds no lock "
                        "there", debug=True)]
        words = RELEASE_WORDS.get(reason, f"with reason {reason}")
        hold = dev.holders[cid]
        why = hold.drop_reason if hold.dropped_at is not None else \
            IDLE if reason == p.ReleaseReason.IDLE else RELEASED
        dropped = hold.dropped_at is not None
        lent = []
        if reason == p.ReleaseReason.IDLE and not dropped:
            self.gaps.released_idle(cid, device, now, idle_waited_s(
                hold.idle_hint_ms, idle_us, now - hold.granted_at))
            lent = self.gap_rules.lend(dev, cid, hold, now)
        held = self._end_hold(dev, cid, now, why)
        return [Log(f"release {client}: device {device} {words}, held {held:.3f} s")] + lent + \
            self.gang_rules.let_go(cid, now, dropped) + self._settle(dev, now)

    def mem_report(self, cid: int, device: int, allocated: int, total: int, now: float) -> list:
        client, refused = self._naming(cid, device)
        if client is None:
            return refused
        ordinal, device = device, client.numbering.scheduler_device(device)
        if device is None:
            return [Log(f"memory {client} on its device {ordinal} not counted: which GPU that "
                        "is, only its registered device says", debug=True)]
        refused = self.capacity.report(cid, device, total)
        allocated = self.claim_rules.believed(client, device, allocated, now)  # checks/claim_rules.py
        before = client.allocated.get(device, 0)
        self.allocated[device] += allocated - before
        self.users[device] += (allocated > 0) - (before > 0)
        client.allocated[device] = allocated
        self._note_crowding(device)
        dev = self.devices.get(device)
        if self.mode is p.Mode.OFF or (dev is not None and cid in dev.holders):
            self.residency.running(device, cid, allocated)  # it runs: its memory is there
        else:
            self.residency.shrink_to(device, cid, allocated)
        actions = [Log(f"memory {client}: device {device} {allocated} bytes allocated",
                       debug=True)]
        if refused:
            actions.append(Log(f"memory {client}: it {refused}", warning=True))
        actions += self.budget_rules.budget_moved(client, device, now)
        if dev is not None and cid in dev.holders and self.mode is not p.Mode.OFF:
            actions += self.room_rules.room_beside_holders(dev, client, now)
        if dev is not None:  # a holder grew or shrank, or the capacity is known now
            actions += self._settle(dev, now)
        else:  # the memory of idle programs may no longer all fit beside this one's
            actions += self.room_rules.prepare_hints(device, now)
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
            hold.quantum_end = min(max(hold.quantum_end, now + hold.turn_s),
                                   hold.granted_at + 2 * hold.turn_s)
        if not done:
            # Each report pushes the deadline on while the count has grown within STALLED_S (a
            # chunk of each stream may take a while on a slow link): a move stuck in the driver
            # that keeps reporting the same count is revoked like any holder that does not let go.
            if hold is not None and hold.dropped_at is not None:
                if size > hold.moved_so_far:
                    hold.moved_so_far, hold.moved_grew_at = size, now
                if now - max(hold.moved_grew_at, hold.dropped_at) < STALLED_S:
                    hold.revoke_at = max(hold.revoke_at, now + self.grace_s)
            return [Log(f"moving {client}: device {device}, {size} bytes to the "
                        f"{'host' if to_host else 'device'} so far", debug=True)]
        if hold is not None and hold.dropped_at is not None and not to_host:
            # Dropped while its memory came back: the move out the drop asked for starts only
            # now, so it gets the time it would have had from the drop, from now on.
            hold.revoke_at = max(hold.revoke_at, now + self.grace_s +
                                 self.room_rules.link(device).to_host.seconds(hold.drop_evict))
        seconds = elapsed_us / 1e6
        believed = self.residency.moved_out(device, cid, size) if to_host else size
        if hold is not None and not to_host:
            # A holder's memory is all back once it says so, but for what it moved off and did
            # not bring back: memory it leaves on the host for page faults (libnvs's cold
            # memory, a server's cleared cache) takes no room on the device. A move out it
            # reported only after its grant (an EVICT's, crossing the grant) came back too.
            moved_off = hold.moved_off + self.residency.brought_back(device, cid)
            self.residency.came_back(device, cid, moved_off, size,
                                     client.allocated.get(device, 0))
            hold.moved_off = 0
            dev.fetching.pop(cid, None)
        # Only bytes it was asked for teach the rates, which set other clients' deadlines too.
        counted = self.credit.counted(device, cid, to_host, believed)
        refused = []
        if size > 0:  # clamped to its memory there: a client names no device it has none on
            self.tallies.moved_bytes(device, to_host, size)
            if device not in self.links:
                self.links[device] = self.room_rules.link(device)  # with the device's link prior
            if not self.links[device].record(to_host, size, seconds, counted):
                refused = self._refused_rate(client, device, counted, seconds)
        rate = f" ({size / seconds / GB:.1f} GB/s)" if seconds > 0 else ""
        failed = ", cut short: the driver refused the rest" if flags & p.MOVED_FAILED else ""
        actions = [Log(f"moved {client}: device {device}, {size} bytes to the "
                       f"{'host' if to_host else 'device'} in {seconds:.3f} s{rate}{failed}")]
        actions += refused
        fetched = hold is not None and not to_host
        if dev is not None and (dev.evictions.pop(cid, None) is not None or fetched):
            actions += self._settle(dev, now)
        return actions

    def _refused_rate(self, client: Client, device: int, counted: int, seconds: float) -> list:
        """Said once per client: a program whose reports are false, or whose moves do not cross
        the link, would say the same at every move."""
        if client.rate_refused:
            return []
        client.rate_refused = True
        return [Log(f"rates of device {device}: a move by {client} not counted, {counted} bytes "
                    f"in {seconds:.6f} s being faster than any host link "
                    f"({LINK_CEILING_BPS / GB:.0f} GB/s); its later ones are not logged")]

    def disconnect(self, cid: int, now: float) -> list:
        viewer = self.viewers.pop(cid, None)
        if viewer is not None:
            return self.budget_rules.leave_budget(viewer, now)
        client = self.clients.pop(cid, None)
        if client is None:
            return []
        self._tally_memory(client, -1)
        self.residency.forget(cid)
        self.credit.forget(cid)
        self.capacity.forget(cid)
        self.gaps.forget(cid)
        self.returns.forget(cid)
        held, waited = [], []
        self.pipeline.forget_client(cid)
        for dev in self.devices.values():
            dev.evictions.pop(cid, None)  # its memory left with it
            dev.evict_queue = [(victim, size) for victim, size in dev.evict_queue
                               if victim != cid]
            if cid in dev.holders:
                self._end_hold(dev, cid, now, GONE, client)
                held.append(dev.index)
            elif cid in dev.waiters:
                self._end_wait(dev, cid, now, client)
                waited.append(dev.index)
        what = "".join([f", held device {listed(held)}" if held else "",
                        f", was waiting for device {listed(waited)}" if waited else ""])
        gang_actions = self.gang_rules.leave(client, now)
        self.usage.forget(cid)
        self.tallies.left(_series(client))
        actions = [Log(f"disconnect {client}{what}")] + gang_actions + \
            self.budget_rules.leave_budget(client, now)
        # Every device: its reported capacity may have left with this client.
        for dev in list(self.devices.values()):
            actions += self._settle(dev, now)
        for device in client.allocated.keys() - self.devices.keys():  # the idle may fit now
            actions += self.room_rules.prepare_hints(device, now)
        return actions

    def configure(self, now: float, tq: int | None = None, mode: p.Mode | None = None,
                  min_slice_ms: int | None = None) -> list:
        """Apply validated settings at once; the caller has checked the values already."""
        old_tq, old_mode, old_slice = self.tq, self.mode, self.min_slice_ms
        self.tq = old_tq if tq is None else tq
        self.mode = old_mode if mode is None else mode
        self.min_slice_ms = old_slice if min_slice_ms is None else min_slice_ms
        if (self.tq, self.mode, self.min_slice_ms) == (old_tq, old_mode, old_slice):
            return [Log(f"settings unchanged: tq {self.tq} s, anti-thrash {self.mode.label}, "
                        f"min slice {self.min_slice_ms} ms")]
        # Only what changed, so a change of one setting reads as that change.
        changes = [f"{name} {old} -> {new}{unit}" for name, old, new, unit in (
            ("tq", old_tq, self.tq, " s"), ("anti-thrash", old_mode.label, self.mode.label, ""),
            ("min slice", old_slice, self.min_slice_ms, " ms")) if old != new]
        actions = [Log("settings: " + ", ".join(changes))]
        if self.mode is p.Mode.OFF:
            for dev in list(self.devices.values()):
                for cid in list(dev.holders):
                    self._end_hold(dev, cid, now, MODE)
                for cid in list(dev.waiters):
                    self._end_wait(dev, cid, now)
            for index in self.devices:
                self.pipeline.forget_device(index)
            self.devices.clear()
            for gang in self.gangs:
                gang.turn_devices = None
            for cid, client in self.clients.items():  # all run now, so all of it comes back
                for device, allocated in client.allocated.items():
                    self.residency.running(device, cid, allocated)
                for device in client.last_grant:  # and each runs beside the others
                    client.last_grant[device] = -1
        else:
            # A running quantum is measured against the new TQ (settling shortens it again for a
            # light weight); a drop already sent stands.
            for dev in self.devices.values():
                for hold in dev.holders.values():
                    if hold.dropped_at is None:
                        hold.turn_s, hold.quantum_end = self.tq, hold.granted_at + self.tq
        actions += [Send(cid, p.SchedMode(self.mode, self.tq)) for cid in self.clients]
        for dev in list(self.devices.values()):
            actions += self._settle(dev, now)
        return actions

    def tick(self, now: float) -> list:
        """Fire every timer that is due at `now`."""
        actions = []
        for gang in self.gangs.expire(now):
            actions += [Log(f"{gang} broken: not complete {self.gangs.timeout_s:g} s after it "
                            "began to form; its members are scheduled one by one",
                            warning=True)]
            actions += self.gang_rules.settle_members(gang, now)
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
            for cid, until in list(dev.fetching.items()):
                if now >= until:  # its report is late or never comes: the link is free now
                    del dev.fetching[cid]
            actions += self._settle(dev, now)
        return actions + self.budget_rules.budget_reports(now)

    def next_deadline(self) -> float | None:
        """When `tick` next has something to do, or None when no timer runs."""
        due = []
        for dev in self.devices.values():
            # Holders are dropped for waiters only once one of them may be granted: at once if
            # one has no gpu_limit, else when the first limited one may. Only those are looked
            # at, so a long queue is not walked.
            eligible = [self._eligible_at(cid, dev.index) for cid in self._paused_waiters(dev)]
            contended_from = -math.inf if len(eligible) < len(dev.waiters) else \
                min(eligible, default=math.inf)
            for cid, hold in dev.holders.items():
                if hold.dropped_at is not None:
                    due.append(hold.revoke_at)
                    continue
                if not self._waits_above(cid, dev.index):  # else its turn ends with that wait
                    due.append(max(min(hold.quantum_end, hold.preempt_at), contended_from))
                due.append(self.limit_rules.reached_at(cid, dev.index))
            due += [at for at in eligible if at != -math.inf]
            due.extend(deadline for deadline, _ in dev.evictions.values())
            if dev.evict_queue or (dev.waiters and self.mode is p.Mode.AUTO):
                due.extend(dev.fetching.values())  # an EVICT or a grant waits for a fetch
        due += [at for at, _ in self.gangs.timeouts()]
        due += [gang.turn_ends for gang in self.gangs
                if gang.turn_devices is not None and self.gang_rules.contended(gang)]
        if (budget_report := self.budget_rules.budget_deadline()) is not None:
            due.append(budget_report)
        return min((at for at in due if at != math.inf), default=None)

    # ----- queries --------------------------------------------------------------------------

    def snapshot(self, now: float, devices: Iterable[int] = ()) -> Snapshot:
        """The state as plain data, for status and anything else that reports on it; with an
        entry for each of `devices` (the GPUs NVML lists) whether anyone uses it or not."""
        indices = set(devices) | set(self.devices) | set(self.links)
        allocated = Counter()
        for client in self.clients.values():
            indices |= {client.numbering.device, *client.allocated}
            allocated.update(client.allocated)
        return Snapshot(tq=self.tq, mode=self.mode, min_slice_ms=self.min_slice_ms,
                        max_clients=self.max_clients, revocations=self.revocations,
                        devices=[self._device_snapshot(index, allocated[index], now)
                                 for index in sorted(indices)],
                        clients=[self._client_snapshot(cid, client, now)
                                 for cid, client in sorted(self.clients.items())],
                        gangs=[GangSnapshot.of(gang, now) for gang in self.gangs],
                        staging=self.staging.view(self.room_rules.staging_wanted(now),
                                                  self.room_rules.staging_told()),
                        unheld=self.budget_rules.unheld_view())

    def _device_snapshot(self, index: int, allocated: int, now: float) -> DeviceSnapshot:
        dev = self.devices.get(index)
        holds = dev.holders if dev else {}
        loan = self.gap_rules.loan_at(index, now)
        capacity, source = self.capacity.of(index)
        return DeviceSnapshot(
            index=index, holders=list(holds), waiters=list(dev.waiters) if dev else [],
            dropping=[cid for cid, hold in holds.items() if hold.dropped_at is not None],
            evicting=sorted(dev.evictions) if dev else [],
            idle_hints_ms={cid: hold.idle_hint_ms for cid, hold in holds.items()
                           if hold.idle_hint_ms},
            allocated=allocated, reported_total=self.capacity.reported(index), capacity=capacity,
            capacity_source=source, reserve=self.reserve,
            holders_allocated=self.holders_memory(index),
            resident=self.residency.total(index),
            switch_seconds=self.room_rules.switch_seconds(index),
            loan_seconds=self.gap_rules.loan_seconds(dev, next(iter(dev.waiters)),
                                                     next(iter(holds), None), now)
            if dev and dev.waiters else 0.0,
            lender=loan.lender if loan else None,
            loan_left_s=loan.until - now if loan else None,
            borrowers=[cid for cid, hold in holds.items() if loan and hold.lender == loan.lender],
            link=copy.deepcopy(self.links.get(index)),
            link_prior_bps=self.link_priors.get(index),
            slices={cid: now - hold.granted_at for cid, hold in holds.items()},
            turns={cid: hold.turn_s for cid, hold in holds.items()},
            last_end=self.last_end.get(index),
            decisions=self._decisions(dev, now) if dev else {},
            last_drop=self.last_drop.get(index))

    def _decisions(self, dev: Device, now: float) -> dict[int, Decision]:
        """Client -> the decision that stands for it on the device: its grant (or its drop), or
        what keeps it waiting."""
        decisions = {cid: hold.dropped_by or hold.granted_by for cid, hold in dev.holders.items()
                     if hold.dropped_by or hold.granted_by}
        return decisions | {cid: self.pipeline.holds_back(dev, cid, now)
                            for cid in dev.waiters}

    def _client_snapshot(self, cid: int, client: Client, now: float) -> ClientSnapshot:
        holding = [dev.holders[cid] for dev in self.devices.values() if cid in dev.holders]
        waiting = [dev.waiters[cid] for dev in self.devices.values() if cid in dev.waiters]
        numbering = client.numbering
        return ClientSnapshot(
            registration=client.registration, device=numbering.device,
            gpu_uuid=numbering.gpu_uuid,
            state="holding" if holding else "waiting" if waiting else "idle",
            hold_time=client.hold_time + sum(now - hold.granted_at for hold in holding),
            waits=client.waits,
            wait_time=client.wait_time + sum(now - wait.since for wait in waiting if wait.queued),
            allocated=dict(sorted(client.allocated.items())),
            resident=self.residency.of(numbering.device, cid),
            revocations=client.revocations, revoked=client.revoked, terms=client.terms,
            overrides=dict(client.overrides),
            label=client.identity.label if client.identity else "",
            usage=dict(sorted(self.usage.of_client(cid, now).items())),
            gaps=dict(sorted(self.gaps.of_client(cid).items())),
            gang=gang.name if (gang := self.gangs.of_client.get(cid)) else "",
            holding=sorted(index for index, dev in self.devices.items() if cid in dev.holders),
            waiting=sorted(index for index, dev in self.devices.items() if cid in dev.waiters),
            mps=client.mps, mps_why=client.mps_why, node=client.node,
            identity_from=client.identity_from,
            units=self.budget_rules.units_of(client),
            others_allocated=self.budget_rules.others_allocated(client),
            sharing=self.budget_rules.sharing_ids(client), throttled=self.returns.of_client(cid),
            refused={d: why for d, why in sorted(client.refusing.items()) if why},
            staging=self.room_rules.staging_of(cid, client))

    def switch_seconds(self, device: int) -> float:
        """What handing the device to the next client now would cost in moves (room_rules.py)."""
        return self.room_rules.switch_seconds(device)

    def host_memory(self, available: int, total: int, now: float) -> list:
        """The host's memory as the shell read it (MemAvailable, MemTotal): where the staging
        budget it leaves changes what each program prepares, every device's programs are told
        again (staging_budget.py)."""
        self.staging.host = HostMemory(max(available, 0), max(total, 0))
        if not self.room_rules.settle_staging(now):
            return []
        actions = []
        for device in sorted(device for device, allocated in self.allocated.items() if allocated):
            dev = self.devices.get(device)
            actions += self._settle(dev, now) if dev is not None else \
                self.room_rules.prepare_hints(device, now)
        return actions

    def node_units(self, reading, now: float) -> list:
        """What every container on the node holds of each GPU (HeldUnits), as the shell read
        it from the kubelet (rules/unheld.py)."""
        return self.budget_rules.node_units(reading, now)

    def gpu_processes(self, devices: dict, now: float, read_at: float | None = None) -> list:
        """NVML's processes of each GPU, as the shell read them (checks/claim_rules.py)."""
        return self.claim_rules.gpu_processes(devices, now, read_at)

    def memory_of(self, cid: int, device: int) -> int:
        return self.clients[cid].allocated.get(device, 0)

    def _tally_memory(self, client: Client, sign: int) -> None:
        """Adds (1) or takes away (-1) a client's memory in the devices' sums."""
        for device, size in client.allocated.items():
            self.allocated[device] += sign * size
            self.users[device] += sign * (size > 0)

    def _note_crowding(self, device: int) -> None:
        """Records the grant count if all the clients' memory on the device, a context reserve
        each, is more than it holds now (or what it holds is unknown). Only then can the driver
        have pushed one program's pages out for another's, and a grant tells of others having
        run only past such a moment: prefetching tens of GiB that never left costs a returning
        program milliseconds before every first kernel. The sums grow only at reports and when
        a client's devices are renumbered, so checking then and at each grant sees every such
        moment."""
        if self._crowded(device):
            self.crowded_at[device] = self.grants.get(device, 0)

    def _crowded(self, device: int) -> bool:
        """Whether all the clients' memory on the device, a context reserve each, is more than it
        holds (or what it holds is unknown)."""
        capacity = self.capacity.of(device)[0]
        return capacity is None or \
            self.allocated[device] + self.reserve * self.users[device] > capacity

    def all_fit(self, dev: Device) -> bool:
        """Whether every client with memory on the device may hold it at once (`auto`)."""
        return self.mode is p.Mode.AUTO and not self._crowded(dev.index)

    def holders_memory(self, device: int) -> int:
        dev = self.devices.get(device)
        return sum(self.memory_of(cid, device) for cid in dev.holders) if dev else 0

    # ----- rules ----------------------------------------------------------------------------

    def _budget(self, dev: Device) -> Budget:
        """What fits on the device now: memory in `auto`, a single holder in `on`."""
        capacity = self.capacity.of(dev.index)[0] if self.mode is p.Mode.AUTO else None
        return Budget(capacity, self.reserve)

    def _eligible_at(self, cid: int, device: int) -> float:
        """When a waiter may be granted (-inf: at once): the pipeline's stages say (a forming
        gang, a gpu_limit)."""
        return self.pipeline.eligible_at(device, cid)

    def _first_contender(self, dev: Device, now: float) -> int | None:
        """The first waiter that may be granted now, if any."""
        return next((cid for cid in dev.waiters if self._eligible_at(cid, dev.index) <= now),
                    None)

    def _paused_waiters(self, dev: Device) -> list[int]:
        """The device's waiters that may not be granted before some time: those with a gpu_limit
        and the members of forming gangs, found without walking the queue."""
        forming = [cid for cid in self.gangs.of_client
                   if cid in dev.waiters and self.gangs.forming(cid) is not None]
        return self.limit_rules.waiters(dev) + forming

    def _fits_beside_holders(self, dev: Device, cid: int) -> bool:
        """Whether `cid` may hold the device beside those holding it and not asked to drop
        (mode `auto`)."""
        active = [other for other, hold in dev.holders.items() if hold.dropped_at is None]
        total = sum(self.memory_of(other, dev.index) for other in active + [cid])
        return self._budget(dev).fits(total, len(active) + 1)

    def _settle(self, dev: Device, now: float) -> list:
        """Bring the device in line with the rules: shrink the holders to a set that fits, grant
        whoever may hold now (once there is room for them), drop holders whose quantum is over
        while others wait, and tell holders how long an idle gap is worth keeping the lock."""
        if self.mode is p.Mode.OFF:
            return []
        actions = self.room_rules.evict_next(dev, now)
        budget = self._budget(dev)
        reserver = self.gang_rules.reserving(dev.index)
        # A gang's members may share a device in its turn: they run as one job.
        active = [] if reserver is not None else \
            [(cid, self.memory_of(cid, dev.index))
             for cid, hold in dev.holders.items() if hold.dropped_at is None]
        keep = set(kept(budget, active))
        for cid, _ in active:
            if cid not in keep:
                actions += self._drop(dev, cid, now, self._why_shrunk(dev, budget),
                                      MODE if self.mode is p.Mode.ON else MEMORY)
        for cid in self.limit_rules.waiters(dev):  # found under its limit, it stays so (usage.py)
            self.usage.meter(cid, dev.index).advance(now)
        # A generator: admission usually stops at the head, so a long queue is not walked.
        waiting = (Waiting(cid, self.memory_of(cid, dev.index), now - wait.since,
                           blocked=self.gang_rules.blocks(cid))
                   for cid, wait in dev.waiters.items()
                   if self._eligible_at(cid, dev.index) <= now
                   and (reserver is None or cid in reserver.members))
        holding = [self.memory_of(cid, dev.index) for cid in dev.holders]
        chosen = admitted(budget, holding, waiting, patience=self.tq)  # before dev.waiters changes
        roomy = self.room_rules.with_room(dev, chosen, now, actions)
        ready = self.room_rules.one_fetch_at_a_time(dev, roomy, now)
        shared = len(dev.holders) + len(ready) > 1
        for cid in ready:
            gang = self.gangs.of(cid)
            if cid not in dev.waiters:
                continue  # granted already, with its gang
            if gang is not None and gang.turn_devices is None:
                actions += self.gang_rules.grant_gang(gang, now)
            else:
                actions += self._grant(dev, cid, now, shared)
        actions += self.gang_rules.end_gang_turn(dev, now)
        actions += self._end_turns(dev, now)
        actions += self.room_rules.ready_room(dev, now) + self.room_rules.ready_room_ahead(dev, now)
        if ready and (first := self._first_contender(dev, now)) is not None:
            # A new holder: the waiter now first weighs its claim against the holders too, with
            # the minimum slice of what the device holds once room is asked for.
            pressed = self.share_rules.press_claim(dev, first, now)
            if pressed:
                actions += pressed + self._end_turns(dev, now)
        actions += self.room_rules.idle_hints(dev, now)
        # A device nobody uses is forgotten (a gang's settling may have done so already), but
        # not while its holder's idle gap is lent (the borrower may let go and ask again), nor
        # while clients move memory out of it.
        if dev.idle and self.gap_rules.loan_at(dev.index, now) is None and \
                not dev.making_room and self.devices.get(dev.index) is dev:
            del self.devices[dev.index]
            self.pipeline.forget_device(dev.index)
        return actions

    def _end_turns(self, dev: Device, now: float) -> list:
        """Drop the holders whose turn is over: at the end of their quantum, or of the minimum
        slice a waiter under its share set them, once some waiter may be granted; at their
        gpu_limit, whoever waits."""
        first = self._first_contender(dev, now)
        actions = []
        for cid, hold in dev.holders.items():
            if hold.dropped_at is not None:
                continue
            if first is not None:
                self.share_rules.shorten_turn(dev, cid, hold, first, now)
            ended = self.pipeline.end_turn(dev, cid, hold, first, now)
            if ended is not None:
                actions += self._drop(dev, cid, now, ended.detail or ended.why, ended.reason,
                                      ended)
        return actions

    def _waits_above(self, cid: int, device: int) -> bool:
        """Whether a holder waits, keeping what it holds, for a device of a higher index. It
        keeps this one past its turn until it has that one: a copy between two devices needs
        both, and libnvs takes them in device order, keeping each while waiting for the next
        (REQUEST_KEEPING). Dropped instead, two programs copying in opposite directions would
        swap locks at every quantum and never copy; kept whatever the order, each could keep
        what the other waits for. In this order the highest device of a chain is dropped, so
        every wait ends."""
        return any(index > device and cid in other.waiters and other.waiters[cid].keeping
                   for index, other in self.devices.items())

    def _why_shrunk(self, dev: Device, budget: Budget) -> str:
        if self.mode is p.Mode.ON:
            return "mode on allows one holder"
        if budget.capacity is None:
            return "capacity unknown, so one holder"
        return (f"holders no longer fit in {mib(budget.capacity)} (allocated "
                f"{mib(self.holders_memory(dev.index))}, {mib(self.reserve)} reserve each)")

    # ----- lock changes ------------------------------------------------------------------------

    def _drop(self, dev: Device, cid: int, now: float, why: str, reason: str,
              decision: Decision | None = None) -> list:
        """`decision`: the stage's, where it gave one; else the usual one for `reason`."""
        decision = decision or DROP_DECISIONS[reason]
        hold = dev.holders[cid]
        evict = self.room_rules.evict_on_drop(dev, cid, now)
        self.credit.asked_out(dev.index, cid, evict)
        self.room_rules.asked(self.clients[cid], dev.index, evict)
        if evict:
            self.tallies.evicted(dev.index)
            self.throttle_rules.charge_moves(next(iter(dev.waiters), None), dev.index, evict, now)
        hold.dropped_at, hold.drop_reason, hold.drop_evict = now, reason, evict
        hold.dropped_by = decision
        hold.revoke_at = now + self.grace_s + self.room_rules.link(dev.index).to_host.seconds(evict)
        ordinal = self.clients[cid].numbering.own_ordinal(dev.index)
        return [Send(cid, p.DropLock(ordinal, 0, evict)),
                Log(f"drop {self.clients[cid]}: device {dev.index} {why}"
                    f"{f', evict {mib(evict)} to the host' if evict else ''}"
                    f"{decision.logged()}")] + \
            self.gang_rules.drop_members(cid, now, reason)

    def _grant(self, dev: Device, cid: int, now: float, shared: bool) -> list:
        client = self.clients[cid]
        wait = dev.waiters[cid]
        decision = self.pipeline.grants(dev, cid, wait, now)  # before the loan's end
        waited = self._end_wait(dev, cid, now)
        if wait.queued:
            self.tallies.waited(dev.index, waited)
        turn = self.share_rules.turn(dev, cid, self._first_contender(dev, now), now)
        gang = self.gangs.of(cid)
        ending = None
        if gang is not None and gang.turn_devices is not None:  # one quantum for the whole gang
            gang.turn_devices.add(dev.index)
            turn = max(gang.turn_ends - now, 0.0)
            ending = self.gang_rules.drop_reason(gang)
        turn, lender, loan_words = self.gap_rules.loan_terms(dev, cid, turn, now)
        dev.holders[cid] = Hold(granted_at=now, quantum_end=now + turn, turn_s=turn,
                                lender=lender, granted_by=decision)
        dev.readied_ahead = False
        self.usage.meter(cid, dev.index).start(now)
        client.revoked = False
        number = self.grants[dev.index] = self.grants.get(dev.index, 0) + 1
        last = client.last_grant.get(dev.index)
        client.last_grant[dev.index] = number
        self._note_crowding(dev.index)
        # Others ran since its last grant while their memory and its own overfilled the device:
        # the driver may have pushed some of its pages out, and it brings all back in bulk.
        others_ran = last is not None and last != number - 1 and \
            self.crowded_at.get(dev.index, -1) >= last
        fetch = self.room_rules.to_fetch(dev.index, cid)
        self.credit.granted(dev.index, cid, fetch)
        # What it moved off itself comes back before it runs, and it says when (MOVED): until
        # then, or twice the time that should take, the link is taken (_one_fetch_at_a_time).
        dev.holders[cid].moved_off = self.residency.brought_back(dev.index, cid)
        coming_back = min(dev.holders[cid].moved_off, fetch)
        if coming_back > 0:
            link = self.room_rules.link(dev.index)
            dev.fetching[cid] = now + 1.0 + 2 * link.to_device.seconds(coming_back)
        # All of it comes back, but for what it said it leaves on the host.
        self.residency.running(dev.index, cid, self.memory_of(cid, dev.index))
        flags = (p.GRANT_AFTER_WAIT if wait.queued else 0) | (p.GRANT_SHARED if shared else 0) | \
            (p.GRANT_OTHERS_RAN if others_ran else 0)
        after = f" after waiting {waited:.3f} s" if wait.queued else ""
        beside = f", shared ({mib(self.memory_of(cid, dev.index))} allocated)" if shared else ""
        ordinal = client.numbering.own_ordinal(dev.index)
        actions = [Send(cid, p.LockGranted(ordinal, flags, round(turn * 1000))),
                   Log(f"grant {client}: device {dev.index}{after}{beside}{loan_words}"
                       f"{decision.logged()}")]
        if ending is not None:  # it joins its gang's drain: their collectives may need it
            actions += self._drop(dev, cid, now, f"with {gang}", ending, with_gang(ending))
        return actions

    def _revoke(self, dev: Device, cid: int, now: float, why: str = "") -> list:
        client = self.clients[cid]
        hold = dev.holders[cid]
        waited = now - (hold.dropped_at if hold.dropped_at is not None else now)
        held = self._end_hold(dev, cid, now, REVOKED)
        client.revocations += 1
        client.revoked = True
        self.revocations += 1
        why = why or (f"no release {waited * 1000:.0f} ms after the drop (grace "
                      f"{self.grace_s * 1000:.0f} ms, plus its move's time, and no progress "
                      "reported since")
        return [Send(cid, p.LockRevoked(client.numbering.own_ordinal(dev.index))),
                Log(f"revoke {client}: device {dev.index}, {why}; held {held:.3f} s")] + \
            self.gang_rules.let_go(cid, now)

    def _end_hold(self, dev: Device, cid: int, now: float, why: str,
                  client: Client | None = None) -> float:
        self.last_end[dev.index] = (cid, why)
        dropped_by = dev.holders[cid].dropped_by
        if dropped_by is not None:
            self.last_drop[dev.index] = dropped_by
        else:
            self.last_drop.pop(dev.index, None)
        dev.fetching.pop(cid, None)
        if cid in self.clients:  # not one leaving: its gaps are forgotten
            self.gaps.hold_ended(cid, dev.index, now)
        self.usage.meter(cid, dev.index).stop(now)
        held = now - dev.holders.pop(cid).granted_at
        client = client or self.clients[cid]
        client.let_go[dev.index] = why in (IDLE, RELEASED)  # not dropped, revoked or gone
        client.hold_time += held
        self.tallies.hold_ended(dev.index, _series(client), held, why)
        return held

    def _retake_terms(self, client: Client, now: float) -> list:
        """Work out a client's terms again (its container's units, its rule, then its
        overrides); tell it a new memory limit, and let the devices it uses see the new weight
        and gpu_limit."""
        terms = self.budget_rules.terms_for(client)
        old = client.terms
        self._set_terms(client, terms)
        if terms == old:
            return []
        actions = [Log(f"terms {client}: {_terms_words(terms).lstrip(', ') or 'the defaults'}")]
        actions += self.budget_rules.tell_limits(client, now,
                                                 at_once=terms.memory_limit != old.memory_limit)
        cid = client.registration.id
        for dev in list(self.devices.values()):
            if cid in dev.holders or cid in dev.waiters:
                actions += self._settle(dev, now)
        return actions

    def _set_terms(self, client: Client, terms: Terms) -> None:
        client.terms = terms
        cid = client.registration.id
        # A container's weight is split among its programs as they come and go (budgets.py).
        self.share_rules.terms_set(cid, terms, terms.source("weight") == KUBELET_SOURCE)
        self.limit_rules.terms_set(cid, terms)

    def _end_wait(self, dev: Device, cid: int, now: float, client: Client | None = None) -> float:
        wait = dev.waiters.pop(cid)
        waited = now - wait.since if wait.queued else 0.0
        (client or self.clients[cid]).wait_time += waited
        return waited
