"""GPU health from NVML: readable or not, critical XIDs, NVML that is missing or comes late; and
each GPU's memory, which sets how many memory units it has."""

from __future__ import annotations

from types import SimpleNamespace

from plugin_helpers import GIB, UUID_A, UUID_B

from gemshare_plugin.gpu_health import APPLICATION_XIDS, Gpu, GpuHealth


A_MEMORY, B_MEMORY = 80 * GIB, 141 * GIB  # as TWO_GPUS has them


def test_every_gpu_nvml_reads_is_healthy_with_its_memory(fake_nvml):
    assert GpuHealth(fake_nvml).check() == [Gpu(0, UUID_A, True, A_MEMORY),
                                            Gpu(1, UUID_B, True, B_MEMORY)]


def test_a_gpu_nvml_cannot_read_later_is_kept_unhealthy_with_the_memory_it_had(fake_nvml,
                                                                               monkeypatch):
    health = GpuHealth(fake_nvml)
    health.check()
    monkeypatch.setenv("FAKE_NVML_FAIL_AT", "0")
    assert health.check() == [Gpu(0, UUID_A, False, A_MEMORY), Gpu(1, UUID_B, True, B_MEMORY)]


def test_a_gpu_unreadable_from_the_start_is_added_once_it_answers(fake_nvml, monkeypatch):
    monkeypatch.setenv("FAKE_NVML_FAIL_AT", "0")
    health = GpuHealth(fake_nvml)
    assert health.check() == [Gpu(1, UUID_B, True, B_MEMORY)]
    monkeypatch.delenv("FAKE_NVML_FAIL_AT")
    assert health.check() == [Gpu(0, UUID_A, True, A_MEMORY), Gpu(1, UUID_B, True, B_MEMORY)]


def test_nvml_that_cannot_start_means_no_gpus_until_it_can(fake_nvml, monkeypatch, caplog):
    monkeypatch.setenv("FAKE_NVML_INIT_ERROR", "Driver Not Loaded")
    health = GpuHealth(fake_nvml)
    assert health.check() == [] and health.check() == []
    assert caplog.text.count("Driver Not Loaded") == 1
    monkeypatch.delenv("FAKE_NVML_INIT_ERROR")
    assert len(health.check()) == 2


def test_names_as_bytes_are_read(fake_nvml, monkeypatch):
    monkeypatch.setenv("FAKE_NVML_BYTES", "1")
    assert [gpu.uuid for gpu in GpuHealth(fake_nvml).check()] == [UUID_A, UUID_B]


class EventNvml:
    """An NVML with two GPUs that reports XID events queued by the test."""

    class NVMLError(Exception):
        pass

    def __init__(self):
        self.events: list = []
        self.registered: list = []
        self.uuids = [UUID_A, UUID_B]

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, handle):
        return self.uuids[handle]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=1, used=0, free=1)

    def nvmlEventSetCreate(self):
        return "set"

    def nvmlEventSetFree(self, event_set):
        pass

    def nvmlDeviceGetSupportedEventTypes(self, handle):
        return 0x8 | 0x1

    def nvmlDeviceRegisterEvents(self, handle, types, event_set):
        self.registered.append((handle, types))

    def nvmlEventSetWait(self, event_set, timeout_ms):
        if not self.events:
            raise self.NVMLError("Timeout")
        return self.events.pop(0)

    def xid(self, handle, xid):
        self.events.append(SimpleNamespace(device=handle, eventData=xid, eventType=0x8))


def test_a_critical_xid_makes_its_gpu_unhealthy_for_good():
    nvml = EventNvml()
    health = GpuHealth(nvml)
    assert all(gpu.healthy for gpu in health.check())
    assert nvml.registered == [(0, 0x8), (1, 0x8)]
    nvml.xid(1, 79)  # fell off the bus
    assert health.check() == [Gpu(0, UUID_A, True, 1), Gpu(1, UUID_B, False, 1)]
    assert health.check()[1].healthy is False


def test_application_xids_leave_the_gpu_healthy():
    nvml = EventNvml()
    health = GpuHealth(nvml)
    health.check()
    for xid in sorted(APPLICATION_XIDS):
        nvml.xid(0, xid)
    assert all(gpu.healthy for gpu in health.check())


def test_an_xid_whose_gpu_cannot_be_told_marks_every_gpu():
    nvml = EventNvml()
    health = GpuHealth(nvml)
    health.check()
    nvml.xid(7, 48)  # a handle NVML cannot name
    assert [gpu.healthy for gpu in health.check()] == [False, False]


def test_a_gpu_whose_index_now_names_another_uuid_is_unhealthy():
    nvml = EventNvml()
    health = GpuHealth(nvml)
    health.check()
    nvml.uuids = [UUID_B, "GPU-new"]
    assert [gpu.healthy for gpu in health.check()] == [False, False]
