"""Fixtures for the DRA driver's tests: four fake GPUs (the stand-in pynvml of tests/fake_nvml),
a stand-in API server, and `dra_node`: the driver running in a thread of this process against
them, with its directories (plugins, registry, CDI) under one short temporary directory, and a
stand-in kubelet for it."""

from __future__ import annotations

import importlib.util
import json
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from dra_helpers import FAKE_NVML_DIR, FOUR_GPUS, GIB, NODE, NODE_UID, WAIT_S, wait_until
from standin_api_server import StandInApiServer
from standin_kubelet import StandInDraKubelet

from gemshare_dra.api_server import ApiServer
from gemshare_dra.cdi import CdiSpecs, HostPaths, write_preload
from gemshare_dra.claims import Preparer
from gemshare_dra.driver import Driver
from gemshare_dra.inventory import GpuInventory
from gemshare_dra.resource_slice import Capacity
from gemshare_dra.server import KubeletServices


@pytest.fixture
def fake_nvml(monkeypatch):
    spec = importlib.util.spec_from_file_location("fake_pynvml_dra", FAKE_NVML_DIR / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("FAKE_NVML_GPUS", json.dumps(FOUR_GPUS))
    for name in ("FAKE_NVML_FAIL_AT", "FAKE_NVML_INIT_ERROR", "FAKE_NVML_BYTES"):
        monkeypatch.delenv(name, raising=False)
    return module


@pytest.fixture
def api_server():
    server = StandInApiServer({NODE: NODE_UID})
    yield server
    server.stop()


@dataclass
class DraNode:
    directory: Path
    api_server: StandInApiServer
    driver: Driver
    kubelet: StandInDraKubelet
    paths: HostPaths
    stop: threading.Event
    thread: threading.Thread

    @property
    def cdi_dir(self) -> Path:
        return self.directory / "cdi"

    def slice(self) -> dict:
        return self.api_server.slices[f"{NODE}-gpu.gemshare.io"]


@pytest.fixture
def dra_node(short_tmp_dirs, fake_nvml, api_server):
    directory = short_tmp_dirs()
    plugins, registry = directory / "plugins", directory / "registry"
    kubeconfig = api_server.kubeconfig(directory / "kubeconfig")
    api = ApiServer(str(kubeconfig))
    capacity = Capacity(GIB)
    preload = str(plugins / "gpu.gemshare.io" / "ld.so.preload")
    write_preload(preload)
    paths = HostPaths("/opt/gemshare/lib/libnvs.so", str(directory / "run" / "scheduler.sock"),
                      preload, dev=str(directory / "dev"))
    driver = Driver(NODE, api, capacity, inventory=GpuInventory(fake_nvml), poll_s=0.2)
    preparer = Preparer(NODE, api, driver.current_inventory, capacity,
                        CdiSpecs(str(directory / "cdi")), paths)
    driver.services = KubeletServices(preparer, str(plugins), str(registry))
    stop = threading.Event()
    thread = threading.Thread(target=driver.run, args=(stop,), daemon=True)
    thread.start()
    node = DraNode(directory, api_server, driver, StandInDraKubelet(registry), paths, stop,
                   thread)
    wait_until(driver.published.is_set, "the first ResourceSlice")
    yield node
    node.kubelet.close()
    stop.set()
    thread.join(WAIT_S)
    assert not thread.is_alive(), "the driver did not stop"
