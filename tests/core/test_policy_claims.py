"""Memory reports are checked against NVML's list of each GPU's processes (claims.py,
claim_rules.py), and processes that use a GPU without the scheduler are noticed."""

from overflow import overflow_share
from policy_driver import Driver

from gemshare_nvs import protocol as p
from gemshare_nvs.core.rules.checks.claims import (ABOVE_MAPPED, ABOVE_MAPPED_CONFIRM_S,
                                                   BELOW_NVML, MARGIN, NOT_LISTED, GpuProcess)

G = 1 << 30
CONTEXT = 300 << 20  # what NVML shows of a program under libnvs: its context, about


def pid_of(cid: int) -> int:
    return 4000 + cid  # the driver's pids


def listing(driver: Driver, *listed: tuple, device: int = 0, read_s_ago: float = 0.0) -> list:
    """NVML lists these (pid, bytes) on the device, or (pid, bytes, managed memory mapped), in
    a list read `read_s_ago` (a moment after the last event when 0)."""
    driver.advance(0.01)
    processes = {entry[0]: GpuProcess(entry[0], entry[1], "proc", 1000, *entry[2:])
                 for entry in listed}
    return driver._take(driver.policy.gpu_processes({device: processes}, driver.now,
                                                    driver.now - read_s_ago))


def warnings(driver: Driver, text: str) -> list[str]:
    return [log.text for log in driver.logs if text in log.text and log.warning]


def test_a_report_from_a_process_with_nothing_on_the_gpu_is_refused_and_moves_nobody():
    driver = Driver(tq=10, mode=p.Mode.AUTO, limit=20 * G, answer_evictions=True)
    driver.register(1)
    driver.register(2)  # the liar: it speaks the protocol, with no GPU context
    listing(driver, (pid_of(1), CONTEXT))
    driver.mem(1, 12 * G)
    driver.request(1)
    driver.release(1)
    driver.mem(2, 4 << 40)
    driver.request(2)
    assert driver.policy.memory_of(2, 0) == 0
    assert not any(log.text.startswith("evict ") for log in driver.logs)
    listing(driver, (pid_of(1), CONTEXT))  # the next list bears the refusal out
    listing(driver, (pid_of(1), CONTEXT))
    assert len(warnings(driver, "memory client 2")) == 1  # logged once
    assert driver.policy.tallies.refused_reports[0, NOT_LISTED] == 1


def test_a_report_that_came_before_its_process_was_listed_counts_once_it_is():
    driver = Driver(tq=10, mode=p.Mode.AUTO, limit=20 * G)
    driver.register(1)
    driver.register(2)
    listing(driver, (pid_of(1), CONTEXT))
    driver.mem(2, 8 * G)  # its context is newer than the list
    assert driver.policy.memory_of(2, 0) == 0
    listing(driver, (pid_of(1), CONTEXT), (pid_of(2), CONTEXT))
    assert driver.policy.memory_of(2, 0) == 8 * G
    assert warnings(driver, "memory client 2") == []
    assert not driver.policy.tallies.refused_reports


def test_a_list_read_before_a_report_came_confirms_no_refusal_of_it():
    driver = Driver(tq=10)
    driver.register(1)
    driver.register(2)
    listing(driver, (pid_of(1), CONTEXT))
    driver.mem(2, 8 * G)
    listing(driver, (pid_of(1), CONTEXT), read_s_ago=0.02)  # read as the report was on its way
    assert driver.policy.memory_of(2, 0) == 0 and warnings(driver, "memory client 2") == []
    listing(driver, (pid_of(1), CONTEXT))
    assert len(warnings(driver, "memory client 2")) == 1


def test_where_the_schedulers_pids_are_not_nvmls_reports_are_believed_as_before():
    driver = Driver(tq=10)
    driver.register(1)
    listing(driver, (77, CONTEXT))  # no client's pid: another pid namespace
    driver.mem(1, 8 * G)
    assert driver.policy.memory_of(1, 0) == 8 * G


def test_a_report_far_below_what_nvml_sees_counts_as_nvmls_figure():
    driver = Driver(tq=10, reserve=512 << 20)
    driver.register(1)
    listing(driver, (pid_of(1), 10 * G))  # device memory, outside libnvs's managed memory
    driver.mem(1, 0 + 1)
    assert driver.policy.memory_of(1, 0) == 10 * G - (512 << 20)
    listing(driver, (pid_of(1), 10 * G))
    assert len(warnings(driver, "far below")) == 1
    assert driver.policy.tallies.refused_reports[0, BELOW_NVML] == 1


def test_a_report_of_a_program_under_libnvs_is_believed_beside_its_context():
    driver = Driver(tq=10)
    driver.register(1)
    listing(driver, (pid_of(1), CONTEXT))
    driver.mem(1, 6 * G)  # managed memory, which NVML does not count per process
    listing(driver, (pid_of(1), CONTEXT))
    assert driver.policy.memory_of(1, 0) == 6 * G
    assert not driver.policy.tallies.refused_reports


def test_a_process_using_the_gpu_without_registering_is_logged_once_and_counted():
    driver = Driver(tq=10)
    driver.register(1)
    listing(driver, (pid_of(1), CONTEXT), (9999, 2 * G))
    assert driver.policy.unregistered.now == {}  # its REGISTER may be on the way
    driver.advance(driver.policy.unregistered.after_s)
    listing(driver, (pid_of(1), CONTEXT), (9999, 2 * G))
    listing(driver, (pid_of(1), CONTEXT), (9999, 2 * G))
    assert [found.pid for found in driver.policy.unregistered.now[0]] == [9999]
    told = warnings(driver, "unregistered GPU user: pid 9999")
    assert len(told) == 1 and "2048 MiB" in told[0] and "uid 1000" in told[0]
    assert driver.policy.tallies.unregistered[0] == 1
    listing(driver, (pid_of(1), CONTEXT))  # it ended
    assert driver.policy.unregistered.now == {}


def test_a_client_is_no_unregistered_user():
    driver = Driver(tq=10)
    driver.register(1)
    driver.register(2, flags=p.REG_VIEW_ONLY)
    listing(driver, (pid_of(1), CONTEXT), (pid_of(2), 0))
    driver.advance(driver.policy.unregistered.after_s)
    listing(driver, (pid_of(1), CONTEXT), (pid_of(2), 0))
    assert driver.policy.unregistered.now == {}


def test_a_program_nvml_lists_makes_idle_ones_ready_before_it_asks():
    """Its context is on the GPU and its memory will come: the idle ones get ready to move out
    (IDLE_HINT with their bytes) from its report on, as before the checks, where a client NVML
    does not list makes nobody get ready (test_policy_notebooks.py)."""
    driver = Driver(tq=10, limit=20 * G)
    driver.register(1)
    driver.register(2)
    listing(driver, (pid_of(1), CONTEXT), (pid_of(2), CONTEXT))
    driver.request(1)
    driver.mem(1, 12 * G)
    driver.release(1, reason=p.ReleaseReason.IDLE, idle_us=100_000)
    driver.mem(2, 12 * G)
    assert [(cid, hint.evict_bytes) for cid, hint in driver.prepares] == \
        [(1, overflow_share(24 * G, 20 * G, givers=1))]


def test_a_program_listed_only_after_its_report_still_makes_the_holder_ready():
    """The first list that shows any client comes after the newcomer reported (the check was
    not armed, so its report was believed at once): once that list shows it, the holder is
    told what may have to leave, as if the list had come first. Without that, its first move
    out waited for staging memory to be pinned (tests/libnvs/test_staging_host_memory.py)."""
    driver = Driver(tq=10, limit=20 * G)
    driver.register(1)
    driver.register(2)
    driver.request(1)
    driver.mem(1, 12 * G)
    driver.mem(2, 12 * G)
    assert all(hint.evict_bytes == 0 for _, hint in driver.hints)
    listing(driver, (pid_of(1), CONTEXT), (pid_of(2), CONTEXT))
    assert driver.hints and driver.hints[-1][0] == 1 and driver.hints[-1][1].evict_bytes > 0


def test_a_report_above_what_its_process_has_mapped_counts_as_that_and_moves_nobody():
    """A client with a context and 1 GiB of managed memory says it has 16 GiB, beside an idle
    program of 12 GiB under 20: counted as what its process bears out, nobody moves for it."""
    driver = Driver(tq=10, mode=p.Mode.AUTO, limit=20 * G, answer_evictions=True)
    driver.register(1)
    driver.register(2)
    listing(driver, (pid_of(1), CONTEXT, 12 * G), (pid_of(2), CONTEXT, 1 * G))
    driver.request(1)
    driver.mem(1, 12 * G)
    driver.release(1)
    driver.mem(2, 16 * G)
    driver.request(2)
    ceiling = CONTEXT + 1 * G + MARGIN
    assert driver.policy.memory_of(2, 0) == ceiling
    assert not any(log.text.startswith("evict ") for log in driver.logs)
    assert warnings(driver, "memory client 2") == []  # no list read after the report yet
    listing(driver, (pid_of(1), CONTEXT, 12 * G), (pid_of(2), CONTEXT, 1 * G))
    listing(driver, (pid_of(1), CONTEXT, 12 * G), (pid_of(2), CONTEXT, 1 * G))
    assert warnings(driver, "memory client 2") == []  # a free since may have made it stale
    assert driver.policy.memory_of(2, 0) == ceiling
    driver.advance(ABOVE_MAPPED_CONFIRM_S)
    listing(driver, (pid_of(1), CONTEXT, 12 * G), (pid_of(2), CONTEXT, 1 * G))
    listing(driver, (pid_of(1), CONTEXT, 12 * G), (pid_of(2), CONTEXT, 1 * G))
    told = warnings(driver, "memory client 2")
    assert len(told) == 1 and f"counted as {ceiling} bytes" in told[0]
    assert driver.policy.tallies.refused_reports[0, ABOVE_MAPPED] == 1
    assert driver.policy.clients[2].refusing[0] == ABOVE_MAPPED


def test_a_program_that_allocated_since_the_last_list_is_believed_in_full_once_a_list_shows_it():
    driver = Driver(tq=10, limit=40 * G)
    driver.register(1)
    listing(driver, (pid_of(1), CONTEXT, 1 * G))
    driver.mem(1, 12 * G)  # allocated after that list was read
    assert driver.policy.memory_of(1, 0) == CONTEXT + 1 * G + MARGIN
    listing(driver, (pid_of(1), CONTEXT, 12 * G))
    assert driver.policy.memory_of(1, 0) == 12 * G
    assert warnings(driver, "memory client 1") == []
    assert not driver.policy.tallies.refused_reports


def test_a_report_a_free_made_stale_is_counted_as_the_mappings_but_not_called_a_refusal():
    """A program reports 14 GiB, frees 1.5 GiB and reports again before the refusal of the first
    could be confirmed: no warning, nothing counted, and its new report believed in full."""
    driver = Driver(tq=10, limit=40 * G)
    driver.register(1)
    listing(driver, (pid_of(1), CONTEXT, 12 * G))
    driver.mem(1, 14 * G)
    listing(driver, (pid_of(1), CONTEXT, 12 * G + G // 2))  # read after the free
    assert driver.policy.memory_of(1, 0) == CONTEXT + 12 * G + G // 2 + MARGIN
    driver.advance(0.1)
    driver.mem(1, 12 * G + G // 2)
    driver.advance(ABOVE_MAPPED_CONFIRM_S)
    listing(driver, (pid_of(1), CONTEXT, 12 * G + G // 2))
    assert driver.policy.memory_of(1, 0) == 12 * G + G // 2
    assert warnings(driver, "memory client 1") == []
    assert not driver.policy.tallies.refused_reports
