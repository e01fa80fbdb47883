"""Every way a program reaches the driver goes through libnvs.so: cuGetProcAddress_v2 (flags 0
and 2, as the CUDA 13 runtime asks), the older cuGetProcAddress, dlsym on libcuda (PyTorch,
Triton) and the exported names (programs linked to libcuda).

Proof of interception: while another process holds the GPU lock, each kind of work submission
through the path under test waits at the gate (its caller shows as waiting at the scheduler and
nothing reaches the driver) until the holder goes; then it reaches the driver in the variant the
program called, the per-thread (_ptsz/_ptds) one included."""

from __future__ import annotations

import re
import signal

import pytest

import libnvs_fakelog as fakelog
from libnvs_programs import REPO, client_of, scheduler_status, start_holder, wait_for

PATHS = ["procaddr", "procaddr-v1", "dlsym", "linked"]

# One stand-in program per kind of submission: step id -> (fake log event, driver function of
# the legacy variant, suffix of its per-thread twin ("" where the driver has none), the words).
# Buffers: m (managed, 1M, made for every program) and n (made by the words that copy m to it).
SUBMISSIONS = {
    "launch": ("launch", "cuLaunchKernel", "_ptsz", ["launch", "100"]),
    "launch-ex": ("launch", "cuLaunchKernelEx", "_ptsz", ["launch-ex", "100"]),
    "coop-launch": ("launch", "cuLaunchCooperativeKernel", "_ptsz", ["coop-launch", "100"]),
    "launch-grid": ("launch", "cuLaunchGrid", "", ["launch-grid", "100"]),
    "launch-grid-async": ("launch", "cuLaunchGridAsync", "", ["launch-grid-async", "100"]),
    "launch-plain": ("launch", "cuLaunch", "", ["launch-plain"]),
    "host-func": ("host_func", "cuLaunchHostFunc", "_ptsz", ["host-func"]),
    "stream-callback": ("stream_callback", "cuStreamAddCallback", "_ptsz", ["stream-callback"]),
    "graph-launch": ("graph_launch", "cuGraphLaunch", "_ptsz",
                     ["capture-graph", "1", "100", "graph-launch"]),
    "write": ("memcpy", "cuMemcpyHtoD_v2", "_ptds", ["write", "m", "1"]),
    "write-async": ("memcpy", "cuMemcpyHtoDAsync_v2", "_ptsz", ["write-async", "m", "1"]),
    "copy-async": ("memcpy", "cuMemcpyDtoDAsync_v2", "_ptsz",
                   ["alloc-managed", "n", "1M", "copy-async", "n", "m"]),
    "copy-peer": ("memcpy", "cuMemcpyPeer", "_ptds",
                  ["alloc-managed", "n", "1M", "copy-peer", "n", "m"]),
    "copy-2d": ("memcpy", "cuMemcpy2D_v2", "_ptds",
                ["alloc-managed", "n", "1M", "copy-2d", "n", "m"]),
    "copy-3d": ("memcpy", "cuMemcpy3D_v2", "_ptds",
                ["alloc-managed", "n", "1M", "copy-3d", "n", "m"]),
    "copy-batch": ("memcpy_batch", "cuMemcpyBatchAsync_v2", "_ptsz",
                   ["alloc-managed", "n", "1M", "copy-batch", "n", "m"]),
    "memset": ("memset", "cuMemsetD8_v2", "_ptds", ["memset", "m", "2"]),
    "memset-2d": ("memset", "cuMemsetD2D8_v2", "_ptds", ["memset-2d", "m", "2"]),
    "memset-async": ("memset", "cuMemsetD32Async", "_ptsz", ["memset-async", "m", "3"]),
    "prefetch": ("prefetch", "cuMemPrefetchAsync_v2", "_ptsz", ["prefetch", "m"]),
    "prefetch-batch": ("prefetch", "cuMemPrefetchBatchAsync", "_ptsz", ["prefetch-batch", "m"]),
    "discard": ("discard", "cuMemDiscardBatchAsync", "_ptsz", ["discard", "m"]),
    "discard-prefetch": ("prefetch", "cuMemDiscardAndPrefetchBatchAsync", "_ptsz",
                         ["discard-prefetch", "m"]),
    "decompress": ("decompress", "cuMemBatchDecompressAsync", "_ptsz", ["decompress"]),
    "map-array": ("map_array", "cuMemMapArrayAsync", "_ptsz", ["map-array"]),
}
# Every event by which work reaches the fake driver (discard-prefetch logs a discard first).
SUBMISSION_EVENTS = {event for event, _, _, _ in SUBMISSIONS.values()} | {"discard"}


# Every kind through every path and variant: the programs of one case run side by side, so the
# whole set costs a few seconds.
@pytest.mark.parametrize("per_thread", [False, True], ids=["legacy", "per-thread"])
@pytest.mark.parametrize("path", PATHS)
def test_each_submission_waits_for_the_lock_and_reaches_its_variant(gpu_with, path, per_thread):
    gpu, scheduler = gpu_with(tq=86400)
    holder = start_holder(gpu)
    waiting = {}
    for step, (_, _, _, words) in SUBMISSIONS.items():
        waiting[step] = gpu.start(["init", "alloc-managed", "m", "1M", *words, "sync"],
                                  resolve=path, ptsz=per_thread)

    def all_waiting():
        status = scheduler_status(scheduler.socket)
        for step, program in waiting.items():
            if program.process.poll() is not None:
                raise AssertionError(f"{step} through {path} ran while another process held "
                                     f"the lock:\n{program.result().describe()}")
        return all((client_of(status, p.pid) or {}).get("state") == "waiting"
                   for p in waiting.values())

    wait_for(all_waiting, "every submitting process to wait for the lock")
    pids = {p.pid for p in waiting.values()}
    # Launches recorded into a capture (graph-launch builds its graph so) are not work yet.
    reached = [e for e in gpu.events() if e.pid in pids and "api" in e.fields
               and e.get("captured") != "1" and e.name.split("_pt")[0] in SUBMISSION_EVENTS]
    assert not reached, f"submissions reached the driver without the lock: {reached}"

    holder.process.send_signal(signal.SIGKILL)
    holder.wait()
    results = {step: program.wait() for step, program in waiting.items()}
    events = gpu.events()
    for step, result in results.items():
        assert result.returncode == 0, f"{step}: {result.describe()}"
        event, api, suffix, _ = SUBMISSIONS[step]
        if per_thread:
            event, api = event + suffix, api + suffix
        calls = [e for e in fakelog.named(events, event, pid=result.pid) if e["api"] == api]
        seen = [(e.name, e.get("api")) for e in events if e.pid == result.pid and "api" in e.fields]
        assert len(calls) == 1, f"{step} through {path}: expected one {event} via {api}: {seen}"


@pytest.mark.parametrize("path", PATHS)
def test_allocations_are_converted_on_every_path(gpu, path):
    result = gpu.run(["init", "alloc", "a", "1M", "attr", "a", "alloc-async", "b", "1M", "attr",
                      "b"], resolve=path)
    assert result.returncode == 0, result.describe()
    assert [a["is_managed"] for a in result.steps("attr")] == ["1", "1"]


def test_lookups_of_hooked_names_get_libnvs_and_others_get_the_driver(gpu):
    result = gpu.run(["get-proc", "cuLaunchKernel", "13000", "0",
                      "get-proc", "cuLaunchKernel", "13000", "2",
                      "get-proc", "cuMemAlloc", "13000", "0",
                      "get-proc", "cuDeviceGetName", "13000", "0",
                      "get-proc", "cuNoSuchFunction", "13000", "0",
                      "get-proc", "cuMemAlloc", "3000", "0"])
    launch, launch_ptsz, alloc, name, missing, too_old = result.steps("get-proc")
    for answer in (launch, launch_ptsz, alloc):
        assert answer["result"] == "0" and answer["object"].endswith("libnvs.so"), answer
    assert name["result"] == "0" and name["object"].endswith("fakecuda/libcuda.so.1")
    assert (missing["result"], missing["status"], missing["found"]) == ("500", "1", "0")
    assert (too_old["result"], too_old["status"], too_old["found"]) == ("500", "2", "0")


def lookups_from_the_fake_table():
    """Every (name, version) the fake driver knows, with the versions just below each."""
    text = (REPO / "tests/fakecuda/fake_entry_points.def").read_text()
    pairs = set()
    for lookup, since in re.findall(r"^FAKE_ENTRY\((\w+),\s*(\d+),", text, re.M):
        for version in (int(since) - 10, int(since), 7000, 12000, 13000):
            pairs.add((lookup, version))
    return sorted(pairs)


def test_lookups_resolve_to_the_functions_the_driver_would_give(gpu):
    """libnvs may hand out its wrapper, but for the same entry point (version, per-thread form)
    and with the same answer the driver gives."""
    steps = [word for lookup, version in lookups_from_the_fake_table() for flags in (0, 2)
             for word in ("get-proc", lookup, version, flags)]
    with_library = gpu.run(steps).steps("get-proc")
    driver = gpu.run(steps, preload=False).steps("get-proc")
    assert len(with_library) == len(driver) == len(steps) // 4
    keys = ("symbol", "version", "flags", "result", "status", "function")
    differ = [(tuple(d[k] for k in keys), tuple(w[k] for k in keys))
              for w, d in zip(with_library, driver)
              if tuple(w[k] for k in keys) != tuple(d[k] for k in keys)]
    assert not differ, "driver answer vs libnvs answer:\n" + "\n".join(map(str, differ))
