"""The plugin beside a fake kubelet: registration, the slot list, allocation, kubelet restarts.

The plugin registers three resources; these tests are about the slots' (gemshare.io/gpu), and
test_plugin_resources_with_kubelet.py about the three together."""

from __future__ import annotations

import os
import time

import grpc
import pytest
from fake_kubelet import FakeKubelet, Stream
from plugin_helpers import HOST_PATHS, UUID_A, UUID_B

from gemshare_plugin import api
from gemshare_plugin.allocation import (
    CONTAINER_LIBRARY,
    CONTAINER_SOCKET_DIR,
    SHARED_MEMORY_DIR,
    Paths,
)
from gemshare_plugin.service import MAX_STREAMS

SLOTS = 3
# Each resource registers on a socket of its own.
RESOURCES = {"gemshare.io/gpu": "gemshare.io-gpu.sock",
             "gemshare.io/gpu-memory": "gemshare.io-gpu-memory.sock",
             "gemshare.io/gpu-compute": "gemshare.io-gpu-compute.sock"}


@pytest.fixture
def kubelets(kubelet_dir):
    made: list[FakeKubelet] = []

    def start(**options) -> FakeKubelet:
        made.append(FakeKubelet(str(kubelet_dir), **options).start())
        return made[-1]

    yield start
    for kubelet in made:
        kubelet.stop(remove_sockets=False)


def ids(uuid: str, slots: int = SLOTS) -> list[str]:
    return [f"{uuid}::{slot}" for slot in range(slots)]


def all_healthy() -> dict[str, str]:
    return {device_id: api.HEALTHY for device_id in ids(UUID_A) + ids(UUID_B)}


def next_list_where(stream, condition, timeout: float = 10.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        devices = stream.next(timeout=max(0.01, deadline - time.monotonic()))
        if condition(devices):
            return devices


def test_registers_with_the_kubelets_api_and_advertises_slots_per_gpu(
        kubelets, kubelet_dir, plugin_factory):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    stream = kubelet.wait_for_stream()
    for name in RESOURCES:
        kubelet.wait_for_stream(resource=name)
    assert [request.resource_name for request in kubelet.registrations] == list(RESOURCES)
    for request, endpoint in zip(kubelet.registrations, RESOURCES.values()):
        assert request.version == "v1beta1"
        assert request.endpoint == endpoint
        assert os.path.exists(os.path.join(kubelet_dir, request.endpoint))
        assert request.options.get_preferred_allocation_available
        assert not request.options.pre_start_required
    assert all(options.get_preferred_allocation_available for options in kubelet.options)
    assert stream.next() == all_healthy()


def test_a_gpu_nvml_loses_turns_its_slots_unhealthy_and_back(
        kubelets, kubelet_dir, plugin_factory, monkeypatch):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    stream = kubelet.wait_for_stream()
    assert stream.next() == all_healthy()
    monkeypatch.setenv("FAKE_NVML_FAIL_AT", "1")
    lost = next_list_where(stream, lambda devices: devices != all_healthy())
    assert lost == {**{device_id: api.HEALTHY for device_id in ids(UUID_A)},
                    **{device_id: api.UNHEALTHY for device_id in ids(UUID_B)}}
    monkeypatch.delenv("FAKE_NVML_FAIL_AT")
    assert next_list_where(stream, lambda devices: devices == all_healthy())


def test_allocate_one_slot(kubelets, kubelet_dir, plugin_factory):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    response = kubelet.client().allocate([f"{UUID_B}::2"])
    [container] = response.container_responses
    assert dict(container.envs) == {
        "LD_PRELOAD": CONTAINER_LIBRARY,
        "GEMSHARE_SOCKET": f"{CONTAINER_SOCKET_DIR}/scheduler.sock",
        "NVIDIA_VISIBLE_DEVICES": UUID_B}
    mounts = {(m.container_path, m.host_path, m.read_only) for m in container.mounts}
    assert mounts == {(CONTAINER_LIBRARY, HOST_PATHS.library, True),
                      (CONTAINER_SOCKET_DIR, os.path.dirname(HOST_PATHS.scheduler_socket), True)}


def test_allocate_with_mps_adds_the_pipe_directory_and_shared_memory_read_write(
        kubelets, kubelet_dir, plugin_factory):
    kubelet = kubelets()
    pipe = "/run/gemshare-test/mps/pipe"
    plugin_factory(kubelet_dir, slots=SLOTS,
                   paths=Paths(library=HOST_PATHS.library,
                               scheduler_socket=HOST_PATHS.scheduler_socket,
                               mps_pipe_directory=pipe))
    [container] = kubelet.client().allocate([f"{UUID_B}::2"]).container_responses
    assert set(container.envs) == {"LD_PRELOAD", "GEMSHARE_SOCKET", "NVIDIA_VISIBLE_DEVICES"}
    mounts = {(m.container_path, m.host_path, m.read_only) for m in container.mounts}
    assert mounts == {(CONTAINER_LIBRARY, HOST_PATHS.library, True),
                      (CONTAINER_SOCKET_DIR, os.path.dirname(HOST_PATHS.scheduler_socket), True),
                      (pipe, pipe, False),
                      (SHARED_MEMORY_DIR, SHARED_MEMORY_DIR, False)}


def test_allocate_several_slots_names_each_gpu_once(kubelets, kubelet_dir, plugin_factory):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    client = kubelet.client()
    one_gpu, two_gpus = client.allocate(
        [f"{UUID_A}::0", f"{UUID_A}::2"],
        [f"{UUID_B}::1", f"{UUID_A}::1", f"{UUID_B}::0"]).container_responses
    assert one_gpu.envs["NVIDIA_VISIBLE_DEVICES"] == UUID_A
    assert two_gpus.envs["NVIDIA_VISIBLE_DEVICES"] == f"{UUID_A},{UUID_B}"
    assert all(mount.read_only for mount in two_gpus.mounts)


@pytest.mark.parametrize("bad", ["GPU-not-ours::0", "nonsense", f"{UUID_A}::x", "", "::3",
                                 f"{UUID_A}::{SLOTS}", f"{UUID_A}::01"])
def test_allocate_refuses_ids_it_never_advertised(kubelets, kubelet_dir, plugin_factory, bad):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    client = kubelet.client()
    with pytest.raises(grpc.RpcError) as refused:
        client.allocate([f"{UUID_A}::0", bad])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device ID" in refused.value.details()
    assert repr(bad) in refused.value.details()
    # The plugin still serves.
    assert client.allocate([f"{UUID_A}::0"]).container_responses


def test_allocate_refuses_an_empty_request(kubelets, kubelet_dir, plugin_factory):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.client().allocate([])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_allocate_answers_without_a_scheduler(kubelets, kubelet_dir, plugin_factory):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    assert not os.path.exists(HOST_PATHS.scheduler_socket)
    [container] = kubelet.client().allocate([f"{UUID_A}::1"]).container_responses
    assert container.envs["LD_PRELOAD"] == CONTAINER_LIBRARY


def test_preferred_allocation_packs_onto_the_gpu_with_most_free_slots(
        kubelets, kubelet_dir, plugin_factory):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    available = [f"{UUID_A}::0", f"{UUID_B}::0", f"{UUID_B}::1", f"{UUID_B}::2"]
    request = api.PreferredAllocationRequest(container_requests=[
        api.ContainerPreferredAllocationRequest(available_deviceIDs=available,
                                                allocation_size=2),
        api.ContainerPreferredAllocationRequest(available_deviceIDs=available,
                                                must_include_deviceIDs=[f"{UUID_A}::0"],
                                                allocation_size=2)])
    packed, required = kubelet.client().call("GetPreferredAllocation",
                                             request).container_responses
    assert list(packed.deviceIDs) == [f"{UUID_B}::0", f"{UUID_B}::1"]
    assert list(required.deviceIDs) == [f"{UUID_A}::0", f"{UUID_B}::0"]


def test_pre_start_container_is_answered(kubelets, kubelet_dir, plugin_factory):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    response = kubelet.client().call("PreStartContainer",
                                     api.PreStartContainerRequest(devices_ids=[f"{UUID_A}::0"]))
    assert response == api.PreStartContainerResponse()


def test_a_kubelet_restart_that_removes_the_sockets_gets_a_new_registration(
        kubelets, kubelet_dir, plugin_factory, caplog):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    kubelet = kubelets()
    running = plugin_factory(kubelet_dir, slots=SLOTS)
    first = kubelet.wait_for_stream()
    assert first.next() == all_healthy()
    wait_for_every_resource(kubelet)
    kubelet.stop()  # removes kubelet.sock and the plugin's socket, as a restarting kubelet does
    assert first.ended.wait(10)
    time.sleep(0.3)  # the plugin notices and waits for the kubelet's socket
    kubelet.start()
    second = kubelet.wait_for_stream(2)
    assert second.next() == all_healthy()
    wait_for_every_resource(kubelet, 2)
    assert len(kubelet.registrations) == 2 * len(RESOURCES)
    assert running.plugin.registrations == 2 * len(RESOURCES)
    assert "was removed" in caplog.text
    [container] = kubelet.client().allocate([f"{UUID_A}::0"]).container_responses
    assert container.envs["NVIDIA_VISIBLE_DEVICES"] == UUID_A


def test_a_new_kubelet_socket_alone_gets_a_new_registration(
        kubelets, kubelet_dir, plugin_factory, caplog):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    kubelet.wait_for_stream().next()
    wait_for_every_resource(kubelet)
    kubelet.stop(remove_sockets=False)  # gRPC removes kubelet.sock; the plugin's sockets stay
    assert not os.path.exists(kubelet.socket)
    assert os.path.exists(os.path.join(kubelet_dir, kubelet.registrations[0].endpoint))
    time.sleep(0.05)  # the new socket file differs in its times even if its inode is reused
    kubelet.start()
    assert kubelet.wait_for_stream(2).next() == all_healthy()
    wait_for_every_resource(kubelet, 2)
    assert len(kubelet.registrations) == 2 * len(RESOURCES)
    assert "the kubelet restarted" in caplog.text


def test_a_missing_kubelet_socket_is_waited_for(kubelet_dir, plugin_factory, caplog):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    running = plugin_factory(kubelet_dir, slots=SLOTS)
    deadline = time.monotonic() + 10
    while "waiting for the kubelet's socket" not in caplog.text:
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.02)
    time.sleep(0.3)
    assert running.thread.is_alive() and running.plugin.registrations == 0
    kubelet = FakeKubelet(str(kubelet_dir)).start()
    try:
        assert kubelet.wait_for_stream().next() == all_healthy()
        wait_for_every_resource(kubelet)
        assert len(kubelet.registrations) == len(RESOURCES)
    finally:
        kubelet.stop(remove_sockets=False)


def test_a_refused_registration_is_tried_again(kubelets, kubelet_dir, plugin_factory, caplog):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    kubelet = kubelets(refuse="failed to dial device plugin: context deadline exceeded")
    running = plugin_factory(kubelet_dir, slots=SLOTS)
    deadline = time.monotonic() + 10
    while caplog.text.count("context deadline exceeded") < 2:
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.02)
    assert kubelet.attempts >= 2
    assert "not registered with the kubelet yet" in running.plugin.readiness()
    assert running.thread.is_alive()
    kubelet.refuse = None
    assert kubelet.wait_for_stream().next() == all_healthy()
    wait_for_every_resource(kubelet)
    deadline = time.monotonic() + 10  # the last stream opens just after its registration
    while running.plugin.readiness() is not None:
        assert time.monotonic() < deadline, running.plugin.readiness()
        time.sleep(0.02)


@pytest.mark.parametrize("refusal", [
    'the ResourceName "gemshare.io/gpu" is invalid',
    'requested API version "v1beta1" is not supported by kubelet. Supported versions are '
    '["v1beta2"]',
])
def test_a_refusal_that_cannot_change_is_not_asked_again_until_the_kubelet_restarts(
        kubelets, kubelet_dir, plugin_factory, caplog, refusal):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    kubelet = kubelets(refuse=refusal)
    running = plugin_factory(kubelet_dir, slots=SLOTS)
    deadline = time.monotonic() + 10
    while caplog.text.count("not asking it again") < len(RESOURCES):
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.02)
    # Backoff here is at most 0.2 s and the loop looks every 0.05 s: a plugin that retried
    # would have asked several times over in this while.
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert running.thread.is_alive()
        time.sleep(0.05)
    assert kubelet.attempts == len(RESOURCES)  # once for each resource
    assert caplog.text.count("as it will every time: not asking it again") == len(RESOURCES)
    assert running.plugin.readiness() == \
        f"gemshare.io/gpu: the kubelet refused the registration: UNKNOWN: {refusal}"
    kubelet.stop(remove_sockets=True)  # a new kubelet (maybe another version) is asked afresh
    restarted = kubelets()
    assert restarted.wait_for_stream().next() == all_healthy()
    wait_for_every_resource(restarted)
    assert len(restarted.registrations) == len(RESOURCES)


def test_garbage_requests_are_refused_and_the_plugin_serves_on(
        kubelets, kubelet_dir, plugin_factory):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    client = kubelet.client()
    raw = client.channel.unary_unary(api.method_path("DevicePlugin", "Allocate"))
    with pytest.raises(grpc.RpcError):
        raw(b"\xff\xff\xff\xff", timeout=5)
    unknown = client.channel.unary_unary("/v1beta1.DevicePlugin/NoSuchMethod")
    with pytest.raises(grpc.RpcError) as refused:
        unknown(b"", timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert client.allocate([f"{UUID_A}::0"]).container_responses


def test_streams_past_the_cap_are_refused_and_allocate_still_answers(
        kubelets, kubelet_dir, plugin_factory):
    kubelet = kubelets()
    plugin_factory(kubelet_dir, slots=SLOTS)
    client = kubelet.client()
    kubelet.wait_for_stream().next()
    extra = [Stream(client.channel) for _ in range(MAX_STREAMS)]
    try:
        deadline = time.monotonic() + 10
        while not any(stream.ended.is_set() for stream in extra):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.2)
        assert [stream.ended.is_set() for stream in extra].count(True) == 1
        assert client.allocate([f"{UUID_A}::0"]).container_responses
    finally:
        for stream in extra:
            stream.cancel()


def test_a_missing_socket_directory_is_waited_for(kubelet_dir, plugin_factory, caplog):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    later = kubelet_dir / "later"
    running = plugin_factory(later, slots=SLOTS)
    deadline = time.monotonic() + 10
    while "does not exist" not in caplog.text:
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.02)
    later.mkdir()
    kubelet = FakeKubelet(str(later)).start()
    try:
        assert kubelet.wait_for_stream().next() == all_healthy()
        wait_for_registrations(running, len(RESOURCES))
    finally:
        kubelet.stop(remove_sockets=False)


def test_nvidia_device_plugin_beside_it_is_warned_of_once(kubelets, kubelet_dir, plugin_factory,
                                                          caplog):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    (kubelet_dir / "nvidia-gpu.sock").touch()  # as NVIDIA's plugin leaves it
    kubelet = kubelets()
    running = plugin_factory(kubelet_dir, slots=SLOTS)
    kubelet.wait_for_stream()
    # Registering again (our socket removed, as by a kubelet restart) says nothing new.
    wait_for_every_resource(kubelet)
    os.unlink(kubelet_dir / "gemshare.io-gpu.sock")
    kubelet.wait_for_stream(2)
    wait_for_registrations(running, len(RESOURCES) + 1)
    assert caplog.text.count("NVIDIA's device plugin serves on this node too "
                             "(nvidia-gpu.sock)") == 1


def test_no_warning_without_nvidias_plugin(kubelets, kubelet_dir, plugin_factory, caplog):
    caplog.set_level("INFO", logger="gemshare-device-plugin")
    kubelet = kubelets()
    running = plugin_factory(kubelet_dir, slots=SLOTS)
    kubelet.wait_for_stream()
    wait_for_registrations(running, len(RESOURCES))
    assert "registered gemshare.io/gpu" in caplog.text
    assert "NVIDIA's device plugin" not in caplog.text


def wait_for_every_resource(kubelet, count: int = 1) -> None:
    """Until each resource's `count`-th registration has its stream."""
    for name in RESOURCES:
        kubelet.wait_for_stream(count, resource=name)


def wait_for_registrations(running, count: int) -> None:
    """Until the plugin has registered `count` times, then stop it: whatever it does after a
    registration is done by then."""
    deadline = time.monotonic() + 10
    while running.plugin.registrations < count:
        assert time.monotonic() < deadline, running.plugin.registrations
        time.sleep(0.02)
    running.stop()
