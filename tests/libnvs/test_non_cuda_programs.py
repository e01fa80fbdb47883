"""Programs that never touch CUDA run under LD_PRELOAD=libnvs.so exactly as without it: no
thread, no socket, no connection to the scheduler, no output. This is what makes listing
libnvs.so in /etc/ld.so.preload safe."""

from __future__ import annotations

import os
import re
import sys

import pytest

from libnvs_programs import scheduler_status

# Reports what the library could have changed about the process; dlsym and dlopen go through
# libnvs's dlsym hook without being CUDA.
PROBE = """
import ctypes, os
libc = ctypes.CDLL("libc.so.6")
libc.getpid()
tasks = len(os.listdir("/proc/self/task"))
sockets = sum(os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
              for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}"))
print(f"tasks={tasks} sockets={sockets}")
"""

PROGRAMS = {
    "true": (["/bin/true"], ""),
    "shell": (["/bin/sh", "-c", "echo hello; ls / > /dev/null"], "hello\n"),
    "python": ([sys.executable, "-c", PROBE], "tasks=1 sockets=0\n"),
}


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_without_cuda_is_untouched(gpu_with, name, strict):
    gpu, scheduler = gpu_with(debug=True)
    command, expected = PROGRAMS[name]
    env = {"GEMSHARE_REQUIRE_SCHEDULER": "1"} if strict else {}
    with_library = gpu.start([], command=command, env=env).wait()
    without = gpu.start([], command=command, env=env, preload=False).wait()
    assert with_library.returncode == without.returncode == 0, with_library.describe()
    assert with_library.stdout == without.stdout == expected
    assert with_library.stderr == "", with_library.stderr
    assert scheduler_status(scheduler.socket)["clients"] == []
    # The scheduler (with --debug) logs every connection; only this test's own may appear.
    peers = {int(pid) for pid in re.findall(r"connection \d+ \(pid (\d+),[^)]*\) opened",
                                            scheduler.log())}
    assert peers <= {os.getpid()}, f"the program connected to the scheduler: {scheduler.log()}"


def test_a_program_without_cuda_stays_silent_when_no_scheduler_runs(fake_gpu):
    result = fake_gpu.start([], command=["/bin/sh", "-c", "echo quiet"],
                            env={"GEMSHARE_DEBUG": "1"}).wait()
    assert (result.returncode, result.stdout, result.stderr) == (0, "quiet\n", "")
