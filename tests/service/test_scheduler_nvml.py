"""What the scheduler takes from NVML, with a stand-in pynvml (tests/fake_nvml)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.cost import LINK_EFFICIENCY
from gemshare_nvs.service.gpus import Gpus

FAKE_NVML = Path(__file__).resolve().parents[1] / "fake_nvml"
GIB = 1 << 30
TWO_GPUS = [
    {"name": "Fake H100", "uuid": "GPU-11111111-2222-3333-4444-555555555555",
     "total": 80 * GIB, "used": 1 * GIB, "pcie": [5, 16]},
    {"name": "Fake H200", "uuid": "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
     "total": 141 * GIB, "used": 0},
]


@pytest.fixture
def fake_nvml(monkeypatch):
    """Gpus() in this process sees the stand-in, configured through the environment."""
    monkeypatch.syspath_prepend(str(FAKE_NVML))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)

    def configure(gpus=TWO_GPUS, **env):
        monkeypatch.setenv("FAKE_NVML_GPUS", json.dumps(gpus))
        for name, value in env.items():
            monkeypatch.setenv(name, str(value))
        return Gpus()

    yield configure
    sys.modules.pop("pynvml", None)


@pytest.mark.parametrize("as_bytes", ["0", "1"])
def test_names_uuids_and_memory_are_read_per_gpu(fake_nvml, as_bytes):
    gpus = fake_nvml(FAKE_NVML_BYTES=as_bytes)
    assert gpus.available
    assert gpus.describe() == [
        {"index": 0, "name": "Fake H100", "uuid": TWO_GPUS[0]["uuid"],
         "memory_total_bytes": 80 * GIB, "pcie_generation": 5, "pcie_width": 16,
         "memory_used_bytes": GIB},
        {"index": 1, "name": "Fake H200", "uuid": TWO_GPUS[1]["uuid"],
         "memory_total_bytes": 141 * GIB, "memory_used_bytes": 0}]


def test_fixed_facts_are_read_once_and_the_memory_in_use_at_each_request(fake_nvml, monkeypatch):
    gpus = fake_nvml()
    assert gpus.memory_totals() == {0: 80 * GIB, 1: 141 * GIB}
    assert gpus.indices_by_uuid() == {TWO_GPUS[0]["uuid"]: 0, TWO_GPUS[1]["uuid"]: 1}
    changed = [dict(gpu, name="Renamed", used=gpu["used"] + GIB) for gpu in TWO_GPUS]
    monkeypatch.setenv("FAKE_NVML_GPUS", json.dumps(changed))
    described = gpus.describe()
    assert [gpu["name"] for gpu in described] == ["Fake H100", "Fake H200"]
    assert [gpu["memory_used_bytes"] for gpu in described] == [2 * GIB, GIB]


def test_a_gpu_whose_pcie_link_nvml_knows_has_a_link_prior_and_one_without_has_none(fake_nvml):
    gpus = fake_nvml()  # the H100 says PCIe 5.0 x16; the H200 answers Not Supported
    assert gpus.link_priors() == {0: pytest.approx(63.008e9 * LINK_EFFICIENCY)}
    odd = [dict(TWO_GPUS[0], pcie=[9, 16]), dict(TWO_GPUS[1], pcie=[4, 8])]
    assert fake_nvml(odd).link_priors() == {1: pytest.approx(15.752e9 * LINK_EFFICIENCY)}


def test_a_gpu_that_fails_later_ends_the_list_from_then_on(fake_nvml, monkeypatch):
    gpus = fake_nvml()
    monkeypatch.setenv("FAKE_NVML_FAIL_AT", "1")
    assert [gpu["name"] for gpu in gpus.describe()] == ["Fake H100"]
    monkeypatch.setenv("FAKE_NVML_FAIL_AT", "0")
    assert gpus.describe() is None


def test_a_gpu_that_fails_ends_the_list_without_an_error(fake_nvml):
    described = fake_nvml(FAKE_NVML_FAIL_AT=1).describe()
    assert [gpu["name"] for gpu in described] == ["Fake H100"]
    assert fake_nvml(FAKE_NVML_FAIL_AT=0).describe() is None


def test_nvml_that_cannot_start_leaves_the_scheduler_without_it(fake_nvml):
    gpus = fake_nvml(FAKE_NVML_INIT_ERROR="Driver Not Loaded")
    assert not gpus.available and gpus.describe() is None
    assert gpus.reason == "NVML unavailable (NVMLError: Driver Not Loaded)"


def test_close_shuts_nvml_down_once(fake_nvml, tmp_path):
    marker = tmp_path / "shutdown"
    gpus = fake_nvml(FAKE_NVML_SHUTDOWN_FILE=marker)
    gpus.close()
    gpus.close()
    assert marker.read_text() == "shutdown\n" and not gpus.available


def nvml_environment(**extra) -> dict:
    path = os.pathsep.join(filter(None, [str(FAKE_NVML), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "FAKE_NVML_GPUS": json.dumps(TWO_GPUS), **extra}


def test_status_names_each_gpu_and_auto_decides_with_its_memory(scheduler_factory):
    scheduler = scheduler_factory(env=nvml_environment(), anti_thrash="auto")
    with scheduler.connect() as control:
        status = control.request({"op": "status"})["status"]
    assert "GPU information: from NVML" in scheduler.log()
    assert status["nvml"] is True
    devices = {device["index"]: device for device in status["devices"]}
    for index, gpu in enumerate(TWO_GPUS):
        assert devices[index]["name"] == gpu["name"]
        assert devices[index]["uuid"] == gpu["uuid"]
        assert devices[index]["memory_total_bytes"] == gpu["total"]
        assert devices[index]["capacity_bytes"] == gpu["total"]
        assert devices[index]["capacity_source"] == "nvml"
    # The policy expects moves over the H100's PCIe 5.0 x16 link at its prior until it has seen
    # some; the H200's link is not known, so the defaults stand.
    assert devices[0]["pcie_generation"] == 5 and devices[0]["pcie_width"] == 16
    assert devices[0]["link_prior_gbps"] == round(63.008 * LINK_EFFICIENCY, 2)
    assert devices[1]["link_prior_gbps"] is None and "pcie_generation" not in devices[1]


def test_a_client_is_numbered_by_the_nvml_index_of_its_gpu(scheduler_factory):
    scheduler = scheduler_factory(env=nvml_environment())
    with scheduler.connect() as client:
        # CUDA_VISIBLE_DEVICES=1 in the client: its device 0 is NVML's GPU 1.
        client.send(p.Register(0, 0, "renumbered"))
        assert isinstance(client.recv()[0], p.Registered)
        client.send(p.DeviceUuid(0, 0, TWO_GPUS[1]["uuid"]))
        client.send(p.RequestLock(0))
        granted, _ = client.recv()
        assert isinstance(granted, p.LockGranted) and granted.device == 0  # its own numbering
        with scheduler.connect() as control:
            status = control.request({"op": "status"})["status"]
    (entry,) = status["clients"]
    assert entry["device"] == 1 and entry["gpu_uuid"] == TWO_GPUS[1]["uuid"]
    assert [d["holders"] for d in status["devices"] if d["index"] == 1] == [[entry["id"]]]


def test_gemsharectl_shows_the_gpu_names(scheduler_factory):
    scheduler = scheduler_factory(env=nvml_environment())
    result = subprocess.run([sys.executable, "-m", "gemshare_ctl", "--socket",
                             str(scheduler.socket), "status"], capture_output=True, text=True,
                            env=dict(os.environ, COLUMNS="200"), timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Fake H100" in result.stdout and "Fake H200" in result.stdout


def test_each_gpus_processes_are_its_compute_and_mps_lists(fake_nvml):
    gpus = fake_nvml([
        {**TWO_GPUS[0], "compute": [[100, GIB], [101, None]], "mps": [[100, 2 * GIB]]},
        TWO_GPUS[1]])  # no process list: nothing is said of it, rather than "no processes"
    # Graphics programs are Not Supported by the stand-in, as on many data-center GPUs.
    assert gpus.processes() == {0: {100: 2 * GIB, 101: 0}}


def test_without_nvml_no_gpu_lists_processes(fake_nvml):
    assert fake_nvml(FAKE_NVML_INIT_ERROR="no driver").processes() == {}
