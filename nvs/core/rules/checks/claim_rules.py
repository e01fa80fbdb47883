"""The rules of memory claims, as part of the policy core: each client's MEM_REPORT is believed
only as far as NVML's list of the GPU's processes bears it out (claims.py), and the processes
that use a GPU without being clients are logged and counted.

- A report is checked when it comes, against the last list, and again at every list that
  follows (ProcessWatch reads one every second, and at once when a report's process was not in
  the last): a client that was refused is believed as soon as the list shows it, and one whose
  process leaves the list stops counting.
- A refusal is logged once per client, device and reason, after the list that confirms it, and
  counted (tallies.py: the metric gemshare_memory_reports_refused).
- A process NVML lists on a GPU that is no registered client (nor a view-only registration),
  in lists at least 2 s apart (claims.Unregistered: a program's context is made before its
  REGISTER arrives), is logged once, counted (gemshare_unregistered_gpu_processes) and shown in
  status: it uses the GPU outside every rule.

ClaimRules, beside the decision pipeline (pipeline.py), reads the policy's clients, capacity and
the NVML listing it keeps (`listing`, `unregistered`).
"""

from __future__ import annotations

from ...model.actions import Log
from ...model.state import Client
from ...model.text import mib, printable
from .claims import GpuProcess, confirm_after, refusal_words


class ClaimRules:
    def __init__(self, policy):
        self.policy = policy

    def believed(self, client: Client, device: int, reported: int, now: float) -> int:
        """What of a report of `reported` bytes on `device` (the scheduler's) is counted: at
        most a GPU's total (capacity.py), and no more than NVML bears out (claims.py). The
        report is kept, to be weighed again at the next list."""
        reported = min(reported, self.policy.capacity.device_total(device))  # never past a GPU's
        if client.reported.get(device) != reported:
            client.reported_at[device] = now
        client.reported[device] = reported
        believed, why = self.policy.listing.believed(client.registration.pid, device, reported,
                                              self.policy.reserve)
        client.refusing[device] = why
        return believed

    def may_bring_memory(self, cid: int, client: Client, dev, device: int) -> bool:
        """Whether a client's memory may come to the device, so that others get ready to make
        room for it: it holds it, waits for it or has held it, or NVML lists its process there
        (a program with a context there, which has allocated and not run yet). Without NVML's
        word, a client that never asked for the device is taken to bring nothing."""
        return device in client.last_grant or (dev is not None and cid in dev.waiters) or \
            self.policy.listing.lists(client.registration.pid, device)

    def gpu_processes(self, devices: dict[int, dict[int, GpuProcess]], now: float,
                      read_at: float | None = None) -> list:
        """NVML's processes of each GPU it could list, by the scheduler's index, as read from
        `read_at` (by default `now`) on: only a list read after a report confirms its refusal."""
        read_at = now if read_at is None else read_at
        listed_before = self._listed_with_memory()
        self.policy.listing.update(devices, {c.registration.pid for c in self.policy.clients.values()})
        actions = self._newly_listed(self._listed_with_memory() - listed_before, now)
        for client in list(self.policy.clients.values()):
            for device, reported in list(client.reported.items()):
                if client.registration.id not in self.policy.clients:
                    break  # closed by an earlier report's settling
                was = client.refusing.get(device)
                ordinal = client.numbering.own_ordinal(device)
                if self.policy.listing.believed(client.registration.pid, device, reported,
                                         self.policy.reserve)[0] != client.allocated.get(device, 0):
                    actions += self.policy.mem_report(client.registration.id, ordinal, reported, 0, now)
                if client.reported_at.get(device, now) < read_at - confirm_after(was):
                    actions += self._refusal_confirmed(client, device, was, reported)
        return actions + self._unregistered_users(now)

    def _listed_with_memory(self) -> set[tuple[int, int]]:
        """(client, device) for each client with memory on a device where NVML lists it."""
        return {(cid, device) for cid, client in self.policy.clients.items()
                for device, allocated in client.allocated.items()
                if allocated and self.policy.listing.lists(client.registration.pid, device)}

    def _newly_listed(self, pairs: set[tuple[int, int]], now: float) -> list:
        """A client whose memory was believed but that NVML lists on its device only now may
        bring that memory there (may_bring_memory): the others are told again what may have
        to leave. Its report alone does not re-run that when the list that arms the check
        comes after it."""
        actions = []
        for device in sorted({device for _, device in pairs}):
            dev = self.policy.devices.get(device)
            actions += self.policy._settle(dev, now) if dev is not None else \
                self.policy.room_rules.prepare_hints(device, now)
        return actions

    def _refusal_confirmed(self, client: Client, device: int, was: str | None,
                           reported: int) -> list:
        """A refusal that a list after the report bears out: logged once per client, device and
        reason, and counted."""
        why = client.refusing.get(device)
        if why is None or why != was or (device, why) in client.refused:
            return []
        client.refused.add((device, why))
        self.policy.tallies.refused_report(device, why)
        words = refusal_words(why, device, reported, client.allocated.get(device, 0))
        return [Log(f"memory {client}: it {words}", warning=True)]

    def _unregistered_users(self, now: float) -> list:
        known = {c.registration.pid for c in (*self.policy.clients.values(), *self.policy.viewers.values())}
        actions = []
        for device, found in self.policy.unregistered.seen(self.policy.listing.unregistered(known), now):
            self.policy.tallies.unregistered_user(device)
            who = f"uid {found.uid}" if found.uid is not None else "uid unknown"
            actions.append(Log(
                f"unregistered GPU user: pid {found.pid} ({printable(found.name, 64) or '?'}, "
                f"{who}) uses device {device} ({mib(found.used_bytes)} per NVML) without the "
                "scheduler: no lock, budget or rule applies to it", warning=True))
        return actions
