"""libnvs.so's environment: debug logging, bad values, and what it tells the scheduler about
the process (name, Kubernetes pod, Unified Memory)."""

from __future__ import annotations

import re

from libnvs_programs import wait_file, wait_for_client


def test_debug_lines_carry_a_gemshare_prefix(gpu):
    result = gpu.run(["init", "launch", 100, "sync"], env={"GEMSHARE_DEBUG": "1"})
    assert result.returncode == 0, result.describe()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines, "GEMSHARE_DEBUG=1 logged nothing"
    assert all(line.startswith(f"gemshare[{result.pid}]: ") for line in lines), result.stderr


def test_without_debug_a_scheduled_program_is_silent(gpu):
    result = gpu.run(["init", "alloc", "a", "1M", "launch", 100, "sync", "free", "a"])
    assert (result.returncode, result.stderr) == (0, ""), result.describe()


def test_bad_settings_are_named_and_the_defaults_used(gpu):
    result = gpu.run(["init", "alloc", "a", "1M", "attr", "a", "launch", 100, "sync"],
                     env={"GEMSHARE_IDLE_RELEASE_MS": "soon",
                          "GEMSHARE_UNIFIED_MEMORY": "maybe", "GEMSHARE_MOVE_STREAMS": "17",
                          "GEMSHARE_SCHEDULER_TIMEOUT_MS": "50",
                          "GEMSHARE_STAGING_MAX_MIB": "lots"})
    assert result.returncode == 0, result.describe()
    warnings = "\n".join(result.gemshare_lines())
    assert re.search(r"GEMSHARE_IDLE_RELEASE_MS=soon", warnings), result.stderr
    assert re.search(r"GEMSHARE_UNIFIED_MEMORY=maybe", warnings), result.stderr
    assert re.search(r"GEMSHARE_MOVE_STREAMS=17: expected .* from 1 to 16; using 4", warnings), \
        result.stderr
    assert re.search(r"GEMSHARE_SCHEDULER_TIMEOUT_MS=50: expected .* from 100 to 3600000; "
                     r"using 10000", warnings), result.stderr
    assert re.search(r"GEMSHARE_STAGING_MAX_MIB=lots: expected whole MiB from 0 to \d+; staging "
                     r"memory is then bounded only by", warnings), result.stderr
    assert result.ok("attr")["is_managed"] == "1"  # the default: Unified Memory on


def registered_client(gpu, scheduler, env):
    program = gpu.start(["init", "touch-file", gpu.path("up"), "wait-file", gpu.path("down")],
                        env=env)
    wait_file(gpu.path("up"))
    client = wait_for_client(scheduler.socket, program.pid)
    gpu.path("down").touch()
    assert program.wait().returncode == 0
    gpu.path("up").unlink()
    gpu.path("down").unlink()
    return client


def test_registration_names_the_process_its_pod_and_its_memory_mode(gpu_with):
    gpu, scheduler = gpu_with()
    client = registered_client(gpu, scheduler, {"POD_NAME": "trainer-0",
                                                "POD_NAMESPACE": "research"})
    assert (client["name"], client["pod"], client["namespace"]) == ("standin", "trainer-0",
                                                                    "research")
    assert client["unified_memory"] is True
    plain = registered_client(gpu, scheduler, {"GEMSHARE_UNIFIED_MEMORY": "0"})
    assert plain["unified_memory"] is False
