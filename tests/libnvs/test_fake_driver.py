"""The fake libcuda.so.1 on its own (no libnvs.so): it must behave like the driver in everything
the libnvs tests rely on, or those tests would prove nothing."""

from __future__ import annotations

import time

import pytest

import libnvs_fakelog as fakelog
from libnvs_programs import wait_file

CUDA_SUCCESS = "0"
CUDA_ERROR_INVALID_VALUE = "1"
CUDA_ERROR_OUT_OF_MEMORY = "2"
CUDA_ERROR_NOT_INITIALIZED = "3"
CUDA_ERROR_NOT_FOUND = "500"
CUDA_ERROR_NOT_READY = "600"
CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = "900"
CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = "901"


def run(fake_gpu, steps, **options):
    return fake_gpu.run(steps, preload=False, **options)


def test_calls_before_cuinit_fail_as_on_the_driver(fake_gpu):
    result = run(fake_gpu, ["alloc", "a", "1M", "init", "alloc", "b", "1M"])
    assert result.one("init")["result"] == CUDA_SUCCESS
    first, second = result.steps("alloc")
    assert first["result"] == CUDA_ERROR_NOT_INITIALIZED
    assert second["result"] == CUDA_SUCCESS


def test_device_memory_runs_out_but_managed_memory_may_exceed_the_device(fake_gpu):
    result = run(fake_gpu, ["init", "total-mem", "alloc", "a", "40M", "alloc", "b", "40M",
                            "alloc-managed", "m", "1G", "attr", "a", "attr", "m"])
    assert result.ok("total-mem")["total"] == str(64 << 20)
    a, b = result.steps("alloc")
    assert a["result"] == CUDA_SUCCESS and b["result"] == CUDA_ERROR_OUT_OF_MEMORY
    assert result.ok("alloc-managed")["size"] == str(1 << 30)
    attrs = {fields["name"]: fields for fields in result.steps("attr")}
    assert attrs["a"]["is_managed"] == "0" and attrs["a"]["ipc_capable"] == "1"
    assert attrs["m"]["is_managed"] == "1" and attrs["m"]["ipc_capable"] == "0"
    events = fake_gpu.events()
    assert [e["result"] for e in fakelog.named(events, "alloc_device")] == ["0", "2"]
    assert fakelog.named(events, "alloc_managed")[0]["size"] == str(1 << 30)


def test_processes_naming_one_shared_device_compete_for_its_memory(fake_gpu):
    holder = fake_gpu.start(["init", "alloc", "a", "40M", "touch-file", fake_gpu.path("held"),
                             "wait-file", fake_gpu.path("done")], preload=False)
    wait_file(fake_gpu.path("held"))
    other = run(fake_gpu, ["init", "mem-info", "alloc", "b", "40M"])
    fake_gpu.path("done").touch()
    assert holder.wait().returncode == 0
    assert other.one("alloc")["result"] == CUDA_ERROR_OUT_OF_MEMORY
    assert other.ok("mem-info")["free"] == str(24 << 20)


def test_queued_work_is_asynchronous_and_synchronization_waits_for_it(fake_gpu):
    gate = fake_gpu.path("gate")
    program = fake_gpu.start(["init", "block-until", gate, "launch", "100", "event-record",
                              "stream-query", "event-query", "touch-file", fake_gpu.path("queried"),
                              "sync", "stream-query", "event-query"], preload=False)
    wait_file(fake_gpu.path("queried"))
    gate.touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    before, after = result.steps("stream-query")
    assert before["result"] == CUDA_ERROR_NOT_READY and after["result"] == CUDA_SUCCESS
    before, after = result.steps("event-query")
    assert before["result"] == CUDA_ERROR_NOT_READY and after["result"] == CUDA_SUCCESS
    events = fake_gpu.events()
    kernel_end = fakelog.exec_intervals(events, result.pid, {"kernel"})[0][1]
    assert fakelog.named(events, "ctx_sync")[0].ns > kernel_end


def test_synchronous_copies_wait_for_earlier_work(fake_gpu):
    result = run(fake_gpu, ["init", "alloc", "a", "1M", "fill", "a", "0x5a", "check", "a",
                            "0x5a"])
    assert result.ok("check")["ok"] == "1"
    events = fake_gpu.events()
    (kernel,) = fakelog.exec_intervals(events, result.pid, {"kernel"})
    copy_begin = fakelog.named(events, "exec_begin")[-1]
    assert copy_begin["op"] == "copy" and copy_begin.ns > kernel[1]


def test_pitched_and_virtual_memory_hold_real_bytes(fake_gpu):
    result = run(fake_gpu, ["init", "alloc-pitch", "p", "100", "7", "write", "p", "9", "check",
                            "p", "9", "vmm-alloc", "v", "3M", "write", "v", "4", "check", "v", "4",
                            "mem-info", "free", "v", "mem-info"])
    pitch = result.ok("alloc-pitch")
    assert int(pitch["pitch"]) >= 100 and int(pitch["pitch"]) % 4 == 0
    assert [c["ok"] for c in result.steps("check")] == ["1", "1"]
    assert result.ok("vmm-alloc")["size"] == str(4 << 20)  # rounded to the 2 MiB granularity
    during, after = (int(m["free"]) for m in result.steps("mem-info"))
    assert after - during == 4 << 20


@pytest.mark.parametrize("mode, expected_end", [("global", CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
                                                ("relaxed", CUDA_SUCCESS)])
def test_synchronizing_inside_a_capture_is_caught(fake_gpu, mode, expected_end):
    result = run(fake_gpu, ["init", "stream-new", "capture-begin", mode, "launch", "100",
                            "is-capturing", "sync-other-thread", "capture-end"])
    assert result.ok("is-capturing")["status"] == "1"
    sync = result.one("sync-other-thread")
    end = result.one("capture-end")
    assert end["result"] == expected_end
    events = fake_gpu.events()
    assert not fakelog.exec_intervals(events, result.pid), "captured work must not run"
    if mode == "global":
        assert sync["result"] == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        assert fakelog.named(events, "capture_invalidated")
    else:
        assert sync["result"] == CUDA_SUCCESS
        assert not fakelog.named(events, "capture_invalidated")


def test_the_capturing_thread_itself_may_not_synchronize(fake_gpu):
    result = run(fake_gpu, ["init", "stream-new", "capture-begin", "thread", "sync",
                            "capture-end"])
    assert result.one("sync")["result"] == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert result.one("capture-end")["result"] == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED


def test_a_captured_graph_runs_its_work_when_launched(fake_gpu):
    result = run(fake_gpu, ["init", "capture-graph", "3", "200", "sync", "graph-launch",
                            "graph-launch", "sync"])
    assert result.returncode == 0, result.describe()
    events = fake_gpu.events()
    assert len(fakelog.named(events, "graph_launch")) == 2
    assert len(fakelog.exec_intervals(events, result.pid, {"kernel"})) == 6


@pytest.mark.parametrize("symbol, version, flags, function", [
    ("cuMemAlloc", 13000, 0, "cuMemAlloc_v2"),
    ("cuLaunchKernel", 13000, 0, "cuLaunchKernel"),
    ("cuLaunchKernel", 13000, 2, "cuLaunchKernel_ptsz"),
    ("cuMemcpyHtoD", 12000, 2, "cuMemcpyHtoD_v2_ptds"),
    ("cuMemAlloc", 12000, 2, "cuMemAlloc_v2"),  # no per-thread form: the plain one
    ("cuLaunchKernel", 6050, 2, "cuLaunchKernel"),  # per-thread forms begin with CUDA 7.0
    ("cuCtxSynchronize", 12000, 0, "cuCtxSynchronize"),
    ("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"),
    ("cuStreamBeginCapture", 10000, 2, "cuStreamBeginCapture_ptsz"),
    ("cuStreamBeginCapture", 12000, 2, "cuStreamBeginCapture_v2_ptsz"),
])
def test_cugetprocaddress_honours_version_and_flags(fake_gpu, symbol, version, flags, function):
    result = run(fake_gpu, ["get-proc", symbol, version, flags])
    answer = result.one("get-proc")
    assert (answer["result"], answer["status"], answer["function"]) == ("0", "0", function)
    assert answer["object"].endswith("fakecuda/libcuda.so.1")


@pytest.mark.parametrize("symbol, version, result, status", [
    ("cuNoSuchFunction", 13000, CUDA_ERROR_NOT_FOUND, "1"),
    ("cuMemAlloc", 3000, CUDA_ERROR_NOT_FOUND, "2"),  # older than any ABI the fake implements
    ("cuMemAlloc", 99000, CUDA_ERROR_INVALID_VALUE, "99"),  # newer than the driver
])
def test_cugetprocaddress_refuses_what_it_cannot_resolve(fake_gpu, symbol, version, result,
                                                          status):
    answer = run(fake_gpu, ["get-proc", symbol, version, 0]).one("get-proc")
    assert (answer["result"], answer["status"]) == (result, status)
    if result == CUDA_ERROR_NOT_FOUND:
        assert answer["found"] == "0"


def test_a_child_forked_after_cuinit_cannot_use_the_driver(fake_gpu):
    result = run(fake_gpu, ["init", "fork", "alloc", "a", "1M", "end", "alloc", "b", "1M"])
    child, parent = result.steps("alloc")
    assert child["result"] == CUDA_ERROR_NOT_INITIALIZED
    assert parent["result"] == CUDA_SUCCESS


def test_a_child_forked_before_cuinit_may_initialize(fake_gpu):
    result = run(fake_gpu, ["fork", "init", "alloc", "a", "1M", "end"])
    assert result.ok("init") and result.ok("alloc")
    assert result.one("fork")["status"] == "0"


def test_log_lines_name_the_called_variant_and_the_stream(fake_gpu):
    run(fake_gpu, ["init", "launch", "10", "sync"])
    run(fake_gpu, ["init", "launch", "10", "sync"], ptsz=True)
    legacy, per_thread = fakelog.named(fake_gpu.events(), "launch", "launch_ptsz")
    assert (legacy.name, legacy["api"], legacy["stream_kind"]) == (
        "launch", "cuLaunchKernel", "legacy")
    assert (per_thread.name, per_thread["api"], per_thread["stream_kind"]) == (
        "launch_ptsz", "cuLaunchKernel_ptsz", "per_thread")


def test_a_bad_device_size_is_named(fake_gpu):
    result = fake_gpu.run(["init"], preload=False, env={"FAKECUDA_DEVICE_MEM": "lots"})
    assert result.one("init")["result"] == CUDA_ERROR_INVALID_VALUE
    assert "FAKECUDA_DEVICE_MEM" in result.stderr


def test_a_stream_dies_with_its_context_when_the_primary_context_is_reset(fake_gpu):
    result = run(fake_gpu, ["init", "stream-new", "launch", 100, "primary-reset", "launch", 100,
                            "stream-new", "launch", 100, "sync"])
    assert result.ok("primary-reset")
    before, stale, fresh = result.steps("launch")
    assert before["result"] == CUDA_SUCCESS and fresh["result"] == CUDA_SUCCESS
    assert stale["result"] == "400"  # CUDA_ERROR_INVALID_HANDLE
    assert len(fakelog.named(fake_gpu.events(), "stream_dead")) == 1


def test_prefetches_last_until_the_hold_file_exists(fake_gpu):
    hold = fake_gpu.path("hold")
    program = fake_gpu.start(["init", "alloc-managed", "m", "1M", "prefetch", "m", "touch-file",
                              fake_gpu.path("submitted"), "sync"], preload=False,
                             env={"FAKECUDA_PREFETCH_HOLD": str(hold)})
    wait_file(fake_gpu.path("submitted"))
    released = time.monotonic_ns()
    hold.touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    (prefetch,) = fakelog.named(fake_gpu.events(), "prefetch")
    assert fakelog.exec_ends(fake_gpu.events(), result.pid)[prefetch["seq"]] > released


def test_a_prefetch_lasts_the_bytes_it_moves_at_the_migrate_rate(fake_gpu):
    # At 0.05 GB/s, 5 MiB to the host take 105 ms, and so does the way back; a prefetch that finds
    # the memory where it sends it (to the device again, to the host again) moves nothing.
    result = run(fake_gpu, ["init", "alloc-managed", "m", "5M", "prefetch-host", "m", "prefetch",
                            "m", "prefetch", "m", "alloc-managed", "h", "4M", "prefetch-host",
                            "h", "prefetch-host", "h", "sync"],
                 env={"FAKECUDA_MIGRATE_GBPS": "0.05"})
    assert result.returncode == 0, result.describe()
    took = [end - begin for begin, end in
            fakelog.exec_intervals(fake_gpu.events(), result.pid, {"prefetch"})]
    assert took[0] >= 104_000_000 and took[1] >= 104_000_000, took
    assert took[2] < 20_000_000, "moving memory that is already there took time"
    assert took[3] >= 83_000_000 and took[4] < 20_000_000, took


def test_prefetches_to_the_host_past_the_limit_are_refused(fake_gpu):
    result = run(fake_gpu, ["init", "alloc-managed", "a", "2M", "alloc-managed", "b", "2M",
                            "prefetch-host", "a", "prefetch-host", "b", "prefetch", "b", "sync"],
                 env={"FAKECUDA_HOST_PREFETCH_LIMIT": "3M"})
    assert [s["result"] for s in result.steps("prefetch-host")] == \
        [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY]
    assert result.ok("prefetch")
    events = fake_gpu.events()
    assert [e["dst"] for e in fakelog.named(events, "prefetch")] == ["-1", "0"]
    (refused,) = fakelog.named(events, "prefetch_refused")
    assert (refused["size"], refused["dst"]) == (str(2 << 20), "-1")
