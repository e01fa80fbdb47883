"""What the node says a program is: its Kubernetes container, and the units the kubelet allocated
to that container; and what all the node's containers hold of each GPU (HeldUnits).

Plain values: nvs/kubernetes/ finds them (the program's cgroup, the container runtime, the
kubelet's pod-resources API), core/rules/budgets.py turns them into the terms every program of
the container shares. Nothing here comes from the program itself.
"""

from __future__ import annotations

from dataclasses import dataclass

# What the compute units of a container cap besides its weight (the setting `compute_cap`):
# nothing, the share of lock time (gpu_limit = units / 100), or the MPS share of the
# multiprocessors (sm_share = units).
CAP_OFF, CAP_GPU_LIMIT, CAP_SM_SHARE = "off", "gpu_limit", "sm_share"
COMPUTE_CAPS = (CAP_OFF, CAP_GPU_LIMIT, CAP_SM_SHARE)

# Who says who a program is (docs/security.md). Where the node can tell (a CRI socket is given,
# or the program's cgroup names a pod), the program's own pod, namespace and label select
# nothing: the node names its container (NAMED_BY_NODE), says it is in no pod (OUTSIDE_PODS),
# or has not named its pod yet (NOT_NAMED_YET: the node's default terms until it does). Only
# where the node can say nothing, off Kubernetes, is the program taken at its word.
NAMED_BY_NODE, NOT_NAMED_YET, OUTSIDE_PODS, NAMED_BY_PROGRAM = \
    "node", "node: not named yet", "node: in no pod", "program"


@dataclass(frozen=True)
class GpuUnits:
    """A container's units on one GPU, as the device plugin's unit IDs name them."""
    gpu_uuid: str
    memory_units: int = 0
    memory_bytes: int = 0  # the memory units' sizes added up
    compute_units: int = 0  # 1 to 100: hundredths of the GPU


@dataclass(frozen=True)
class NodeIdentity:
    """A program's container as the node knows it. `gpus` is empty when the kubelet allocated
    it no memory or compute units (or could not be asked: `problem` says why)."""
    container_id: str
    pod: str
    namespace: str
    container: str  # the container's name in its pod
    pod_uid: str
    gpus: tuple[GpuUnits, ...] = ()
    problem: str = ""  # what the node could not tell, "" when nothing is missing

    @property
    def qualified(self) -> str:
        """namespace/pod/container, as log lines name a container."""
        return f"{self.namespace}/{self.pod}/{self.container}"


@dataclass(frozen=True)
class HeldUnits:
    """What every container on the node holds of one GPU together, as the kubelet lists it:
    the memory units' bytes and the compute units, and how many containers hold some."""
    gpu_uuid: str
    memory_bytes: int = 0
    compute_units: int = 0
    containers: int = 0
