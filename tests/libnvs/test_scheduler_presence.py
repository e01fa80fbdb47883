"""libnvs.so without a scheduler, with one that appears later, dies or restarts, and in strict
mode (GEMSHARE_REQUIRE_SCHEDULER=1)."""

from __future__ import annotations

from libnvs_programs import FakeGpu, grants, wait_file, wait_for_client


def test_without_a_scheduler_programs_run_unscheduled_with_one_warning(fake_gpu):
    result = fake_gpu.run(["init", "alloc", "a", "1M", "launch", 100, "write", "a", 1, "check",
                           "a", 1, "launches", 3, 100, "sync"])
    assert result.returncode == 0, result.describe()
    warnings = result.gemshare_lines()
    assert len(warnings) == 1, result.stderr
    assert str(fake_gpu.socket) in warnings[0]


def test_a_program_joins_a_scheduler_that_starts_later(built, tmp_path, scheduler_factory,
                                                       restartable):
    scheduler = scheduler_factory(tq=86400)
    scheduler.stop()  # its socket path now has no scheduler behind it
    gpu = FakeGpu(tmp_path, scheduler.socket)
    program = gpu.start(["init", "alloc", "a", "1M", "launch", 100, "sync", "touch-file",
                         gpu.path("unscheduled"), "wait-file", gpu.path("joined"), "launch", 100,
                         "sync"])
    wait_file(gpu.path("unscheduled"))
    later = restartable(scheduler, tq=86400)
    # Its memory report follows its registration, once its launches wait for the lock: the
    # scheduler knowing the client alone would leave the next launch a moment to slip through.
    wait_for_client(later.socket, program.pid, allocated_bytes=1 << 20)
    gpu.path("joined").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    assert grants(later.log(), program.pid) == 1, later.log()
    assert len(result.gemshare_lines()) == 1, result.stderr


def test_strict_mode_fails_cuda_initialization_naming_the_socket(fake_gpu):
    result = fake_gpu.run(["init"], env={"GEMSHARE_REQUIRE_SCHEDULER": "1"})
    assert result.one("init")["result"] != "0"
    assert result.returncode != 0
    message = "\n".join(result.gemshare_lines())
    assert str(fake_gpu.socket) in message and "GEMSHARE_REQUIRE_SCHEDULER" in message, \
        result.stderr


def test_strict_mode_with_a_scheduler_runs_scheduled(gpu_with):
    gpu, scheduler = gpu_with()
    result = gpu.run(["init", "launch", 100, "sync"], env={"GEMSHARE_REQUIRE_SCHEDULER": "1"})
    assert result.returncode == 0, result.describe()
    assert grants(scheduler.log(), result.pid) == 1
    assert not result.gemshare_lines(), result.stderr


def test_a_program_outlives_a_dead_scheduler_and_registers_again(gpu_with, restartable):
    gpu, scheduler = gpu_with(tq=86400)
    program = gpu.start(["init", "launch", 100, "sync", "touch-file", gpu.path("registered"),
                         "wait-file", gpu.path("killed"), "launch", 100, "sync", "touch-file",
                         gpu.path("ran-alone"), "wait-file", gpu.path("restarted"),
                         "launch", 100, "sync"])
    wait_file(gpu.path("registered"))
    wait_for_client(scheduler.socket, program.pid)
    scheduler.process.kill()  # a crash, not a clean stop
    scheduler.stop()
    gpu.path("killed").touch()
    wait_file(gpu.path("ran-alone"))
    again = restartable(scheduler, tq=86400)
    wait_for_client(again.socket, program.pid)
    gpu.path("restarted").touch()
    result = program.wait()
    assert result.returncode == 0, result.describe()
    assert [launch["result"] for launch in result.steps("launch")] == ["0", "0", "0"]
    assert grants(again.log(), program.pid) == 1, again.log()
