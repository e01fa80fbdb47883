"""libnvs tells the scheduler which physical GPU its device 0 is (DEVICE_UUID), so processes
whose CUDA ordinals name different GPUs (different CUDA_VISIBLE_DEVICES) get different locks.
The fake driver's FAKECUDA_GPU_SET stands for a different set of physical GPUs."""

from libnvs_programs import (NO_EARLY_RELEASE, client_of, scheduler_status, wait_file,
                             wait_for_client)


def uuid_of(gpu_set: int) -> str:
    # The fake's UUID bytes: "gemsharefake", two zeros, the set, the ordinal.
    return f"GPU-67656d73-6861-7265-6661-6b650000{gpu_set:02x}00"


def program(gpu, gpu_set: int):
    return gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path(f"held-{gpu_set}"),
                      "wait-file", gpu.path("end"), "launch", 100, "sync"],
                     env={**NO_EARLY_RELEASE, "FAKECUDA_GPU_SET": str(gpu_set)})


def test_programs_on_different_gpus_hold_their_own_locks_at_once(gpu_with):
    gpu, scheduler = gpu_with(tq=86400)
    programs = {gpu_set: program(gpu, gpu_set) for gpu_set in (1, 2)}
    # Neither ever gives its lock back before "end": both get here only with a lock each.
    for gpu_set in programs:
        wait_file(gpu.path(f"held-{gpu_set}"))
    status = scheduler_status(scheduler.socket)
    clients = {gpu_set: client_of(status, p.pid) for gpu_set, p in programs.items()}
    assert {c["state"] for c in clients.values()} == {"holding"}
    assert [clients[s]["gpu_uuid"] for s in (1, 2)] == [uuid_of(1), uuid_of(2)]
    assert clients[1]["device"] != clients[2]["device"]
    gpu.path("end").touch()
    for p in programs.values():
        result = p.wait()
        assert result.returncode == 0, result.describe()


def test_programs_on_one_gpu_take_turns_and_report_it(gpu_with):
    gpu, scheduler = gpu_with(tq=86400)
    first = program(gpu, 7)
    wait_file(gpu.path("held-7"))
    second = gpu.start(["init", "launch", 100, "sync"], env={"FAKECUDA_GPU_SET": "7"})
    waiting = wait_for_client(scheduler.socket, second.pid, state="waiting")
    assert waiting["gpu_uuid"] == uuid_of(7)
    assert waiting["device"] == client_of(scheduler_status(scheduler.socket), first.pid)["device"]
    gpu.path("end").touch()
    for p in (first, second):
        result = p.wait()
        assert result.returncode == 0, result.describe()
