"""The container of a process, from /proc/PID/cgroup in every layout the kubelet and its
runtimes make: cgroup v1 and v2, containerd and CRI-O, the cgroupfs and systemd drivers."""

from __future__ import annotations

import itertools

import pytest
from node_standins import cgroup_file, container_path, put_in_container

from gemshare_nvs.kubernetes.cgroups import ContainerRef, container_in, container_of

CONTAINER = "4f3c2b1a" * 8
POD_UID = "7d5b9e1c-2a3f-4b6d-8e9f-0a1b2c3d4e5f"
RUNTIMES = {"containerd": "containerd", "cri-o": "cri-o"}


@pytest.mark.parametrize("version, driver, runtime, qos", list(itertools.product(
    (1, 2), ("cgroupfs", "systemd"), ("containerd", "cri-o"), ("burstable", "besteffort", ""))))
def test_every_layout_names_the_container_and_its_pod(tmp_path, version, driver, runtime, qos):
    path = container_path(driver, runtime, POD_UID, CONTAINER, qos)
    put_in_container(tmp_path, 4242, cgroup_file(version, path))
    found = container_of(4242, tmp_path)
    # cgroupfs names no runtime: containerd's container is its bare ID there
    named = "" if driver == "cgroupfs" and runtime == "containerd" else RUNTIMES[runtime]
    assert found == ContainerRef(CONTAINER, POD_UID, named)


def test_the_systemd_driver_writes_the_pod_uid_with_underscores():
    path = container_path("systemd", "containerd", POD_UID, CONTAINER)
    assert "_" in path and container_in(path).pod_uid == POD_UID


@pytest.mark.parametrize("path", [
    # a cgroup root of its own before kubepods (kind, --cgroup-root)
    f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
    f"kubelet-kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/cri-containerd-"
    f"{CONTAINER}.scope",
    # a process in a cgroup it made below its container's
    f"/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/crio-{CONTAINER}.scope/"
    "init.scope",
    f"/kubepods/burstable/pod{POD_UID}/{CONTAINER}/worker",
])
def test_prefixes_and_cgroups_below_the_container_still_name_it(path):
    found = container_in(path)
    assert found is not None and found.container_id == CONTAINER


@pytest.mark.parametrize("path", [
    "/system.slice/docker-" + CONTAINER + ".scope",  # a container outside Kubernetes
    "/user.slice/user-1000.slice/session-3.scope",
    "/",
    f"/kubepods/burstable/pod{POD_UID}",  # the pod's own cgroup: no container
    f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID}.slice/"
    f"crio-conmon-{CONTAINER}.scope",  # CRI-O's monitor, not the container
    f"/kubepods/burstable/pod{POD_UID}/{CONTAINER[:12]}",  # no full ID
    f"/kubepods/burstable/pod{POD_UID}/{CONTAINER.upper()}",
])
def test_processes_in_no_kubernetes_container_are_in_none(path):
    assert container_in(path) is None


def test_a_process_gone_unreadable_or_unknown_is_in_no_container(tmp_path):
    assert container_of(999999, tmp_path) is None  # no such file
    assert container_of(0, tmp_path) is None  # SO_PEERCRED from another pid namespace
    put_in_container(tmp_path, 7, "garbage without colons\n\x00\xff")
    assert container_of(7, tmp_path) is None


@pytest.mark.parametrize("path, runtime", [
    (f"/../../pod{POD_UID}/{CONTAINER}", ""),  # a pod of the reader's QoS level (cgroupfs)
    (f"/../../../besteffort/pod{POD_UID}/crio-{CONTAINER}", "cri-o"),  # of another level
    (f"/../../kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/"
     f"cri-containerd-{CONTAINER}.scope", "containerd"),  # the systemd driver's names
])
def test_paths_seen_from_a_cgroup_namespace_of_the_readers_own_name_the_container(
        tmp_path, path, runtime):
    # A scheduler in a cgroup namespace of its own (cgroup v2) reads the others' cgroups from
    # its own: kubepods is above it.
    put_in_container(tmp_path, 4242, cgroup_file(2, path))
    assert container_of(4242, tmp_path) == ContainerRef(CONTAINER, POD_UID, runtime)


@pytest.mark.parametrize("path", [
    "/../docker-" + CONTAINER + ".scope",  # a container outside Kubernetes, seen from one
    "/../..",
    f"/../../pod{POD_UID}",  # a pod's own cgroup: no container
])
def test_paths_seen_from_a_cgroup_namespace_in_no_pods_container_are_in_none(path):
    assert container_in(path) is None
