"""A Kubernetes container's units as one budget for all of its programs on a GPU, as part of the
policy core.

What the units become (docs/kubernetes.md):

- memory units x their size: a memory limit for the container's programs together on that GPU.
  Each program is told, in LIMITS, the limit and what the others have allocated there
  (`budget_used`), again whenever that changes (at most every BUDGET_REPORT_S: a burst of
  allocations is one message), so that its library refuses what would take the sum past it;
- compute units u (1-100): a weight of u / 10 for the container (a container without compute
  units weighs 1, as 10 units would), split among its programs on the GPU that want it at the
  moment (_share_weight): the container has its share when others want the GPU, however many
  of its programs run, and whether its other programs idle or not;
- with the setting compute_cap: also gpu_limit u / 100, split evenly among its programs there
  (a hard cap for the container together), or the MPS sm_share u for each program (MPS limits
  each process, not a group).

Mixed kinds on one GPU (unheld.py): a container that holds no memory units on a GPU where
others do shares what their units leave as one memory limit with the other such programs there;
one that holds no compute units where others do weighs what their units leave, split among the
compute-less containers that want the GPU. Where nobody holds a kind, nothing changes.

Precedence, last wins: the defaults, the kubelet's terms, the program's config rule, its
gemsharectl terms; except that for memory_limit, gpu_limit and sm_share a rule wins only where
it is stricter than the kubelet's, and no term ever takes a program's memory past its
container's budget (the pod was placed on the node by it).

Who a program is (docs/security.md): its REGISTER's own POD_NAMESPACE, POD_NAME and
GEMSHARE_LABEL select rules only where the node can say nothing of it (model/container.py's
NAMED_BY_PROGRAM). Where the node names the container, its names are taken; where it cannot name
it yet, the program has no pod, namespace or label (the rules that match what the node itself
sees apply, the defaults otherwise) until `node_named` gives it the node's and its container's
budget, and its terms change then, LIMITS included.

BudgetRules, beside the decision pipeline (pipeline.py), keeps the budgets and the compute cap;
it reads the policy's clients (and `viewers`, the REG_VIEW_ONLY registrations that only want
their LIMITS), `rules`, `gpu_indices`, `capacity` and `tallies`, and calls its `_retake_terms`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ... import protocol as p
from ..model.actions import Log, Send
from ..model.container import (
    CAP_GPU_LIMIT,
    CAP_SM_SHARE,
    NAMED_BY_NODE,
    NAMED_BY_PROGRAM,
    GpuUnits,
    NodeIdentity,
)
from ..model.state import Client
from ..model.terms import DEFAULT_SOURCE, OVERRIDE_SOURCE, TERM_NAMES, Terms
from ..model.text import mib, printable
from .unheld import (
    COMPUTE_UNITS_PER_GPU,
    UNITS_PER_WEIGHT,
    UnheldUnits,
    pool_weight,
    unheld_terms,
)

KUBELET_SOURCE = "kubelet"
STRICTER = ("memory_limit", "gpu_limit", "sm_share")  # a rule wins only by being stricter
BUDGET_REPORT_S = 0.1  # the most often a program is told of its container's use
DEFAULTS = Terms()


def unit_terms(units: GpuUnits, programs: int, compute_cap: str) -> dict:
    """The terms a container's units on one GPU give each of its `programs` there. The weight is
    the container's, split when shares are reckoned (_share_weight)."""
    values = {}
    if units.memory_bytes:
        values["memory_limit"] = units.memory_bytes
    values["weight"] = (units.compute_units or UNITS_PER_WEIGHT) / UNITS_PER_WEIGHT
    if units.compute_units and compute_cap == CAP_GPU_LIMIT:
        values["gpu_limit"] = units.compute_units / COMPUTE_UNITS_PER_GPU / programs
    elif units.compute_units and compute_cap == CAP_SM_SHARE:
        values["sm_share"] = units.compute_units
    return values


def composed(kubelet: dict, ruled: Terms, overrides: dict) -> Terms:
    """A program's terms from its container's (`kubelet`, unit_terms), its rule's and its
    gemsharectl overrides, by the precedence above."""
    terms = ruled
    if kubelet:
        terms = Terms().with_values(kubelet, KUBELET_SOURCE)
        for name in TERM_NAMES:
            value = getattr(ruled, name)
            given = ruled.source(name) != DEFAULT_SOURCE or value != getattr(DEFAULTS, name)
            if not given or (name in STRICTER and kubelet.get(name) is not None
                             and value is not None and kubelet[name] <= value):
                continue
            terms = terms.with_values({name: value}, ruled.source(name))
    if overrides:
        terms = terms.with_values(overrides, OVERRIDE_SOURCE)
    budget = kubelet.get("memory_limit")
    if budget is not None and (terms.memory_limit is None or terms.memory_limit > budget):
        terms = terms.with_values({"memory_limit": budget}, KUBELET_SOURCE)
    return terms


def budget_used(limit: int | None, budget: int | None, others: int) -> int:
    """LIMITS' budget_used for a program whose own limit is `limit`, within its container's
    `budget` of which the others have allocated `others`: what leaves it min(limit, budget -
    others) less its own, since its limit is never above the budget."""
    if not limit or not budget:
        return 0
    return max(0, others - (budget - limit))


@dataclass(frozen=True)
class Told:
    """The LIMITS a program was sent last, and when."""
    limits: p.Limits
    at: float


@dataclass
class Budgets:
    members: dict[str, set[int]] = field(default_factory=dict)  # container ID -> its clients
    told: dict[int, Told] = field(default_factory=dict)  # client -> its last LIMITS
    due: set[int] = field(default_factory=set)  # clients whose newer LIMITS waits its time
    over: set[tuple[str, str]] = field(default_factory=set)  # (container, GPU) logged over


def node_names(node: NodeIdentity) -> tuple[str, str]:
    """(namespace, pod) as the node names them, made printable."""
    return printable(node.namespace, 64), printable(node.pod)


def said_otherwise(client: Client, said: tuple[str, str], label: str = "") -> list:
    """A warning when the program names a pod, namespace or label `said` that select nothing:
    the node's word is taken, or the node can tell and has not yet."""
    who = client.registration
    namespace, pod = said
    if client.identity_from == NAMED_BY_PROGRAM or \
            (namespace in ("", who.namespace) and pod in ("", who.pod) and not label):
        return []
    claimed = f"pod {namespace or '?'}/{pod or '?'}" if namespace or pod else ""
    if label:
        claimed += f"{', ' if claimed else ''}label {printable(label, 64)}"
    if client.node is not None:
        node = f"the node says {who.namespace}/{who.pod}; the node's word is taken"
    else:
        node = f"the node can tell who it is ({client.identity_from}): what it says selects nothing"
    return [Log(f"register {client}: it says it is {claimed}, but {node}", warning=True)]


class BudgetRules:
    def __init__(self, policy, compute_cap: str):
        self.policy = policy
        self.compute_cap = compute_cap  # what compute units cap besides the weight
        self.budgets = Budgets()  # the programs of each container, and what LIMITS told them
        self.unheld = UnheldUnits(self._gpu_memory)  # what the node's units leave each GPU

    def _gpu_memory(self, gpu_uuid: str) -> int | None:
        index = self.policy.gpu_indices.known_index(gpu_uuid)
        return self.policy.capacity.of(index)[0] if index is not None else None

    def _member(self, cid: int) -> Client | None:
        return self.policy.clients.get(cid) or self.policy.viewers.get(cid)

    def _container_of(self, client: Client) -> list[Client]:
        """Every program of the client's container that the scheduler knows, itself included."""
        node = client.node
        if node is None:
            return [client]
        return [member for cid in sorted(self.budgets.members.get(node.container_id, ()))
                if (member := self._member(cid)) is not None]

    def units_of(self, client: Client) -> GpuUnits | None:
        """The container's units on the client's GPU: the only GPU it has units on, else the
        one whose UUID the client's device has; else the smallest, to be safe."""
        gpus = client.node.gpus if client.node is not None else ()
        if len(gpus) <= 1:
            return gpus[0] if gpus else None
        uuid = client.numbering.gpu_uuid or self.policy.gpu_indices.uuid_of(client.numbering.device)
        return next((gpu for gpu in gpus if gpu.gpu_uuid == uuid), None) or \
            min(gpus, key=lambda gpu: (gpu.memory_bytes, gpu.compute_units))

    def gpu_of(self, client: Client) -> str:
        """The UUID of the GPU the client's budget is on: its container's units', else its
        device's; "" while unknown."""
        units = self.units_of(client)
        if units is not None:
            return units.gpu_uuid
        return client.numbering.gpu_uuid or \
            self.policy.gpu_indices.uuid_of(client.numbering.device)

    def _pooled(self, client: Client, kind: str) -> bool:
        """Whether the client takes its memory limit (kind "memory_bytes") or weight
        ("compute_units") from what the node's units leave its GPU: it is in a container
        holding none of that kind there, and others hold some (unheld.py)."""
        if client.node is None:
            return False
        units = self.units_of(client)
        unheld = self.unheld.of(self.gpu_of(client))
        return unheld is not None and getattr(unheld, kind) is not None and \
            not (units is not None and getattr(units, kind))

    def _everyone(self) -> list[Client]:
        return [*self.policy.clients.values(), *self.policy.viewers.values()]

    def _memory_sharing(self, client: Client) -> list[Client]:
        """The programs whose memory counts against the client's memory budget, itself
        included: its container's on the same units, or, in a container without memory units
        where others hold some, every such program on its GPU."""
        if not self._pooled(client, "memory_bytes"):
            return self._sharing(client)
        gpu = self.gpu_of(client)
        return [member for member in self._everyone() if member is not client and
                self.gpu_of(member) == gpu and self._pooled(member, "memory_bytes")] + [client]

    def memory_budget(self, client: Client) -> int | None:
        """The bytes the client's memory budget holds: its container's memory units', or what
        the node's memory units leave its GPU; None for no budget."""
        units = self.units_of(client)
        if units is not None and units.memory_bytes:
            return units.memory_bytes
        if self._pooled(client, "memory_bytes"):
            return self.unheld.of(self.gpu_of(client)).memory_bytes
        return None

    def _sharing(self, client: Client) -> list[Client]:
        """The programs of the client's container that share its budget (itself included):
        those on the same GPU's units. Each counts its memory on the device it registered,
        which is that GPU whatever its own number for it."""
        units = self.units_of(client)
        return [member for member in self._container_of(client)
                if member is client or self.units_of(member) == units]

    def sharing_ids(self, client: Client) -> list[int]:
        """The clients sharing its container's units (itself included), for status; [] where
        it has none."""
        if self.units_of(client) is None:
            return []
        return sorted(member.registration.id for member in self._sharing(client)
                      if member.registration.id in self.policy.clients)

    def _kubelet_terms(self, client: Client) -> dict:
        if client.node is None:
            return {}
        units = self.units_of(client)
        values = {}
        if units is not None:
            programs = sum(1 for member in self._sharing(client)
                           if member.registration.id in self.policy.clients)
            values = unit_terms(units, max(programs, 1), self.compute_cap)
        held = units or GpuUnits("")
        return values | unheld_terms(bool(held.memory_bytes), bool(held.compute_units),
                                     self.unheld.of(self.gpu_of(client)))

    def share_weight(self, cid: int, device: int) -> float:
        """The weight the client's share on `device` is reckoned by: its own, but one from its
        container's units is the container's, split among the programs of the container there
        that want the device now (holding or waiting for it, itself counted always)."""
        client = self.policy.clients[cid]
        weight = client.terms.weight
        dev = self.policy.devices.get(device)
        if client.node is None or dev is None or client.terms.source("weight") != KUBELET_SOURCE:
            return weight
        wanting = 1 + sum(1 for member in self._sharing(client)
                          if member is not client
                          and member.terms.source("weight") == KUBELET_SOURCE
                          and ((other := member.registration.id) in dev.holders
                               or other in dev.waiters))
        if self._pooled(client, "compute_units"):  # what the units leave, split (unheld.py)
            gpu = self.gpu_of(client)
            containers = {client.node.container_id} | {
                member.node.container_id for other in (*dev.holders, *dev.waiters)
                if (member := self.policy.clients.get(other)) is not None
                and member.terms.source("weight") == KUBELET_SOURCE
                and self.gpu_of(member) == gpu and self._pooled(member, "compute_units")}
            weight = pool_weight(self.unheld.of(gpu).compute_units, len(containers))
        return weight / wanting

    def terms_for(self, client: Client) -> Terms:
        """The client's terms: its container's, its rule's and its overrides."""
        return composed(self._kubelet_terms(client), self.policy.rules(client.identity),
                        client.overrides)

    def others_allocated(self, client: Client) -> int:
        return sum(member.allocated.get(member.numbering.device, 0)
                   for member in self._memory_sharing(client) if member is not client)

    def _limits_now(self, client: Client) -> p.Limits:
        limit = client.terms.memory_limit
        return p.Limits(limit or 0, budget_used(limit, self.memory_budget(client),
                                                self.others_allocated(client)))

    def tell_limits(self, client: Client, now: float, at_once: bool = False) -> list:
        """LIMITS, when what it would say has changed since it was last sent: at once for a new
        limit (or `at_once`), at most every BUDGET_REPORT_S for the others' use alone."""
        cid = client.registration.id
        limits = self._limits_now(client)
        told = self.budgets.told.get(cid)
        if told is None and limits == p.Limits():
            return []  # no LIMITS before REGISTERED already means no limit
        if told is not None and told.limits == limits:
            self.budgets.due.discard(cid)
            return []
        if told is not None and not at_once and told.limits.memory_limit == limits.memory_limit \
                and now < told.at + BUDGET_REPORT_S:
            self.budgets.due.add(cid)
            return []
        self.budgets.told[cid] = Told(limits, now)
        self.budgets.due.discard(cid)
        return [Send(cid, limits)]

    def register_viewer(self, client: Client, now: float) -> list:
        """A REG_VIEW_ONLY registration: its LIMITS and REGISTERED, and nothing else; it is
        kept apart from the clients, so that no status, metric or queue shows it."""
        cid = client.registration.id
        self.policy.viewers[cid] = client
        if client.node is not None:
            self.budgets.members.setdefault(client.node.container_id, set()).add(cid)
        client.terms = self.terms_for(client)
        return self.tell_limits(client, now, at_once=True) + [
            Send(cid, p.Registered(cid, self.policy.mode, self.policy.tq)),
            Log(f"register {client}: view only", debug=True)]

    def join_budget(self, client: Client, now: float) -> list:
        """A program of a container registered: its container's other programs share their
        budget with it from now on."""
        if client.node is None:
            return []
        self.budgets.members.setdefault(client.node.container_id, set()).add(
            client.registration.id)
        return self._rework_budget(client, now, but=client)

    def leave_budget(self, client: Client, now: float) -> list:
        """A program of a container is gone: the others share what it had."""
        cid = client.registration.id
        self.budgets.told.pop(cid, None)
        self.budgets.due.discard(cid)
        node = client.node
        if node is None:
            return []
        # Those sharing what the memory units leave hear that its memory is gone.
        actions = [action for member in self._memory_sharing(client) if member is not client
                   and self._pooled(client, "memory_bytes")
                   for action in self.tell_limits(member, now)]
        members = self.budgets.members.get(node.container_id, set())
        members.discard(cid)
        if not members:
            self.budgets.members.pop(node.container_id, None)
            self.budgets.over = {key for key in self.budgets.over if key[0] != node.container_id}
            return actions
        return actions + self._rework_budget(client, now, but=client)

    def _rework_budget(self, client: Client, now: float, but: Client | None = None) -> list:
        """Work out again the terms and LIMITS of the client's container's programs (`but` one):
        how many share its units, or which GPU they are on, has changed."""
        if client.node is None or not client.node.gpus:
            return []
        actions = []
        for member in self._container_of(client):
            if member is not but:
                actions += self._retake(member, now)
        return actions

    def _retake(self, member: Client, now: float) -> list:
        """A program's terms worked out again, and its LIMITS told where they changed."""
        if member.registration.id in self.policy.clients:
            actions = self.policy._retake_terms(member, now)
        else:  # a viewer: its terms serve its LIMITS alone
            member.terms = self.terms_for(member)
            actions = []
        return actions + self.tell_limits(member, now)

    def budget_moved(self, client: Client, device: int, now: float) -> list:
        """The client's memory on `device` changed: the others sharing its budget hear of it,
        and a budget overrun is logged once (until the container is back within it)."""
        pooled = client.node is not None and self._pooled(client, "memory_bytes")
        if client.node is None or not (client.node.gpus or pooled) or \
                device != client.numbering.device:
            return []
        actions = []
        sharing = self._memory_sharing(client)
        for member in sharing:
            if member is not client:
                actions += self.tell_limits(member, now)
        budget, gpu = self.memory_budget(client), self.gpu_of(client)
        if not budget:
            return actions
        total = sum(member.allocated.get(member.numbering.device, 0) for member in sharing)
        key = ("" if pooled else client.node.container_id, gpu)  # "": the unheld memory's
        if total <= budget:
            self.budgets.over.discard(key)
        elif key not in self.budgets.over:
            self.budgets.over.add(key)
            whose = "what the memory units leave to the containers without any" if pooled else \
                f"budget of container {client.node.qualified}"
            actions.append(Log(f"{whose} on {gpu}: their programs have allocated {mib(total)}, "
                               f"past its {mib(budget)} (allocations made at once by several "
                               "of them)", warning=True))
        return actions

    def budget_renumbered(self, client: Client, now: float) -> list:
        """The client said which GPU its device is: in a container with units on several GPUs
        that says whose budget it shares."""
        if client.node is None:
            return []
        if len(client.node.gpus) < 2:  # which GPU's unheld units it takes, if any
            return self.policy._retake_terms(client, now) + self.tell_limits(client, now) \
                if self.unheld.unheld else []
        return self._rework_budget(client, now)

    def unheld_view(self) -> list[dict]:
        """What the node's units leave each GPU, with the scheduler's index for it (None: a
        GPU it does not know), for status."""
        return [{**entry, "device": self.policy.gpu_indices.known_index(entry["gpu_uuid"])}
                for entry in self.unheld.view()]

    def node_units(self, reading, now: float) -> list:
        """What the node's containers hold of each GPU, read anew: the programs on a GPU whose
        unheld figures changed have their terms and LIMITS worked out again."""
        changed, actions = self.unheld.take(reading)
        if not changed:
            return actions
        for member in self._everyone():
            if member.node is not None and self.gpu_of(member) in changed:
                actions += self._retake(member, now)
        return actions

    def budget_reports(self, now: float) -> list:
        """The LIMITS held back by BUDGET_REPORT_S whose time has come."""
        actions = []
        for cid in sorted(self.budgets.due):
            member = self._member(cid)
            if member is None:
                self.budgets.due.discard(cid)
            elif now >= self.budgets.told[cid].at + BUDGET_REPORT_S:
                actions += self.tell_limits(member, now)
        return actions

    def budget_deadline(self) -> float | None:
        return min((self.budgets.told[cid].at + BUDGET_REPORT_S for cid in self.budgets.due),
                   default=None)

    def node_named(self, cid: int, node: NodeIdentity, now: float) -> list:
        """The node named the container of client `cid`, which registered before it could: the
        client takes the node's pod, namespace and container from now on, joins its container's
        budget, and its terms are worked out again."""
        client = self.policy.clients.get(cid) or self.policy.viewers.get(cid)
        if client is None or client.node is not None:
            return []
        namespace, pod = node_names(node)
        viewer, before = cid in self.policy.viewers, client.registration
        client.registration = dataclasses.replace(
            before, namespace=namespace, pod=pod, container=printable(node.container, 64))
        client.identity = dataclasses.replace(client.identity, pod=pod, namespace=namespace,
                                              container=client.registration.container)
        client.node, client.identity_from = node, NAMED_BY_NODE
        said = Log(f"client {client} is pod {namespace}/{pod}, container "
                   f"{client.registration.container} (from the node, after it registered)")
        if viewer:
            self.budgets.members.setdefault(node.container_id, set()).add(cid)
            client.terms = self.terms_for(client)
            return [said] + self.tell_limits(client, now, at_once=True)
        self.policy.tallies.renamed(before, client.registration, client.identity.label)
        return [said] + self.join_budget(client, now) + self.policy._retake_terms(client, now)
