"""After every way the plugin is made to serve again (the kubelet restarting and removing the
sockets, a new kubelet socket alone, the plugin's socket removed, the plugin itself restarted),
the new ListAndWatch stream of each of the three resources stays open and carries the next
change: the kubelet reads a stream that ends as the plugin gone."""

from __future__ import annotations

import os
import time

import pytest
from fake_kubelet import FakeKubelet
from plugin_helpers import UUID_B

from gemshare_plugin import api

RESOURCES = ("gemshare.io/gpu", "gemshare.io/gpu-memory", "gemshare.io/gpu-compute")
STILL_OPEN_S = 2.0
WAIT_S = 10.0


@pytest.fixture
def kubelet(kubelet_dir):
    made = FakeKubelet(str(kubelet_dir)).start()
    yield made
    made.stop(remove_sockets=False)


def unhealthy_gpus(devices: dict[str, str]) -> set[str]:
    return {device_id.split("::")[0] for device_id, health in devices.items()
            if health == api.UNHEALTHY}


def assert_streams_serve(streams, monkeypatch) -> None:
    """Every stream is still open STILL_OPEN_S after its first list, and sends the list in
    which GPU 1 turns unhealthy."""
    time.sleep(STILL_OPEN_S)
    ended = [name for name, stream in streams.items() if stream.ended.is_set()]
    assert not ended, f"ListAndWatch streams ended after their first list: {ended}"
    monkeypatch.setenv("FAKE_NVML_FAIL_AT", "1")  # GPU 1 (UUID_B) is lost
    for name, stream in streams.items():
        deadline = time.monotonic() + WAIT_S
        while unhealthy_gpus(stream.latest) != {UUID_B}:
            assert not stream.ended.is_set(), f"the {name} stream ended"
            assert time.monotonic() < deadline, f"no list of {name} with GPU 1 unhealthy"
            time.sleep(0.02)
    monkeypatch.delenv("FAKE_NVML_FAIL_AT")


def serve_again(way: str, kubelet: FakeKubelet, kubelet_dir, running, plugin_factory):
    """Make the plugin serve again `way`; the plugin running after it."""
    if way == "kubelet restart":
        kubelet.stop()  # every socket in the directory removed, as the kubelet does
        time.sleep(0.3)  # the plugin notices while there is no kubelet
        kubelet.start()
    elif way == "new kubelet socket":
        kubelet.stop(remove_sockets=False)
        time.sleep(0.05)  # the new socket file differs in its times even if its inode is reused
        kubelet.start()
    elif way == "plugin socket removed":
        for name in RESOURCES:
            os.unlink(os.path.join(kubelet_dir, name.replace("/", "-") + ".sock"))
    else:  # the plugin restarted
        running.stop()
        running = plugin_factory(kubelet_dir)
    return running


@pytest.mark.parametrize("way", ["kubelet restart", "new kubelet socket",
                                 "plugin socket removed", "plugin restart"])
def test_every_stream_stays_open_after_serving_again(kubelet, kubelet_dir, plugin_factory,
                                                      monkeypatch, way):
    running = plugin_factory(kubelet_dir)
    kubelet.latest_streams(1, RESOURCES)
    for round_ in (2, 3):  # twice over: a second restart too
        running = serve_again(way, kubelet, kubelet_dir, running, plugin_factory)
        assert_streams_serve(kubelet.latest_streams(round_, RESOURCES), monkeypatch)
