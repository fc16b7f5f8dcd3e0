"""The scheduling core: an event loop over arrivals, completions, carbon changes, guard instants
and decision ticks (never a per-second loop). It decides where and when each task runs and
produces run *segments* (task, host, wall start, task-time offsets); energy and carbon are
integrated afterwards over fragment boundaries (``scheduling.energy``).

Order at one instant: completions (and the children they unblock), then carbon changes (the
stopper may pause), then guard releases, then decision ticks (default mode: the hold state is
decided again as of the tick, held tasks it no longer holds are released), then arrivals, then
one placement pass over the queue in FIFO order. The queue is head-of-line: the first task that fits no host waits, and the tasks
behind it wait with it (OpenDC's FilterScheduler does the same).

Workflow dependencies: a task arrives at the later of its submission and its last parent's
completion; a task whose parent never finishes (unschedulable, or itself blocked) stays
``blocked``. With time-shifting the deadline guard of a parent uses an *effective* deadline,
the earliest of its own and, for each child with a deadline, the child's effective deadline
minus the child's runtime x (1 + margin), so holding a parent never makes a child miss.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduling.policy import HostState, Request
from scheduling.prefabs import TimeshiftSpec
from scheduling.shift import SHORT_MS, ShiftRules, latest_release
from scheduling.topology import Hosts
from scheduling.workload import Workload

FINISH, CARBON, GUARD, TICK = 0, 1, 2, 4
WAITING, HELD, RUNNING, DONE, UNSCHEDULABLE, BLOCKED = 1, 2, 3, 4, 5, 6


@dataclass
class Schedule:
    """What the loop decided: one row per run segment, per-task facts, counters."""

    seg_task: np.ndarray
    seg_host: np.ndarray
    seg_wall: np.ndarray  # wall-clock start (ms)
    seg_off0: np.ndarray  # task-time offsets covered [off0, off1)
    seg_off1: np.ndarray
    start: np.ndarray  # first start, -1 if never
    finish: np.ndarray  # -1 if never
    host: np.ndarray  # the host it finished on (-1)
    deferred_ms: np.ndarray  # held for carbon before its first start
    paused_ms: np.ndarray  # paused by the stopper until resumed
    guard_released: np.ndarray  # bool: released by the deadline guard
    status: np.ndarray  # DONE | UNSCHEDULABLE | BLOCKED (a parent never finished)
    counters: dict[str, int] = field(default_factory=dict)


class Loop:
    def __init__(self, wl: Workload, hosts: Hosts, policy: Any, seed: int, compat: bool,
                 provider: Any = None) -> None:
        self.wl, self.hosts, self.seed, self.compat = wl, hosts, seed, compat
        self.shift = policy if isinstance(policy, TimeshiftSpec) else None
        self.place_policy = policy.placement if self.shift else policy
        self.rules = ShiftRules(self.shift, provider, compat) if self.shift else None
        self.state = HostState(hosts)
        n = wl.n
        self.runtime = wl.runtime
        self.done_off = np.zeros(n, dtype=np.int64)
        self.seg_start = np.zeros(n, dtype=np.int64)
        self.task_host = np.full(n, -1, dtype=np.int64)
        self.status = np.zeros(n, dtype=np.int8)
        self.version = np.zeros(n, dtype=np.int64)
        self.start = np.full(n, -1, dtype=np.int64)
        self.finish = np.full(n, -1, dtype=np.int64)
        self.deferred = np.zeros(n, dtype=np.int64)
        self.paused = np.zeros(n, dtype=np.int64)
        self.held_since = np.zeros(n, dtype=np.int64)
        self.was_paused = np.zeros(n, dtype=bool)
        self.forced = np.zeros(n, dtype=bool)
        self.segs: list[tuple[int, int, int, int, int]] = []
        self.events: list[tuple[int, int, int, int]] = []
        self.queue: deque[int] = deque()
        self.held: tuple[list[int], list[int]] = ([], [])  # short, long
        self.running: set[int] = set()
        self.n_clusters = len(hosts.cluster_names)
        self.hold_flags = np.zeros((self.n_clusters, 2), dtype=bool)
        self.counters = {"tasks_unschedulable": 0, "pauses": 0, "guard_releases": 0,
                         "held_tasks": 0, "placement_passes": 0, "tick_decisions": 0,
                         "tick_releases": 0}
        self._decided_at: int | None = None  # the last instant the hold state was decided
        cols = (wl.cpu_count.tolist(), wl.cpu_capacity.tolist(), wl.memory.tolist(),
                wl.gpu_count.tolist(), wl.gpu_capacity.tolist(), wl.task_id.tolist())
        self._requests = [Request(a, b, c, d, e, key=k) for a, b, c, d, e, k in zip(*cols, strict=True)]
        self._fit_empty: dict[tuple, bool] = {}
        self._dependencies(wl)

    def _dependencies(self, wl: Workload) -> None:
        parent, child = wl.dependencies()
        n = wl.n
        self.parents_left = np.bincount(child, minlength=n).astype(np.int64)
        by_parent = np.argsort(parent, kind="stable")
        self._kid_start = np.searchsorted(parent[by_parent], np.arange(n + 1))
        self._kids = child[by_parent]
        self._unblocked: list[int] = []
        self.guard_deadline = wl.deadline.copy()
        if parent.size and self.shift is not None and not self.compat:
            from scheduling.workload import topological_order

            margin = self.shift.deadline_margin
            by_child = np.argsort(child, kind="stable")
            pstart = np.searchsorted(child[by_child], np.arange(n + 1))
            parents_of = parent[by_child]
            for c in topological_order(n, parent, child)[::-1].tolist():  # children first
                dc = int(self.guard_deadline[c])
                if dc < 0:
                    continue
                bound = latest_release(dc, int(self.runtime[c]), margin)
                for p in parents_of[pstart[c]: pstart[c + 1]].tolist():
                    if self.guard_deadline[p] < 0 or bound < self.guard_deadline[p]:
                        self.guard_deadline[p] = bound

    # -- helpers ---------------------------------------------------------------------------

    def request(self, i: int) -> Request:
        return self._requests[i]

    def fits_somewhere(self, r: Request) -> bool:
        key = (r.cpu_count, r.cpu_capacity, r.memory, r.gpu_count, r.gpu_capacity)
        if key not in self._fit_empty:
            empty = HostState(self.hosts)
            self._fit_empty[key] = bool(self.place_policy.fits(empty, r).any())
        return self._fit_empty[key]

    def push(self, t: int, kind: int, payload: int, version: int = 0) -> None:
        heapq.heappush(self.events, (t, kind, payload, version))

    def deferrable(self, i: int) -> bool:
        return bool(self.shift is not None and self.wl.deferrable[i] and self.wl.deadline[i] >= 0)

    def remaining(self, i: int, now: int) -> int:
        """Task time left: a running task has also done the time since its segment began."""
        ran = now - int(self.seg_start[i]) if self.status[i] == RUNNING else 0
        return int(self.runtime[i] - self.done_off[i]) - ran

    def may_hold(self, i: int, now: int) -> bool:
        """The deadline guard. Compat: OpenDC's check at a decision, ``now + duration <
        deadline`` with the task's ``duration`` column (``<=`` when memorizing)."""
        remaining = self.remaining(i, now)
        if self.compat:
            end, deadline = now + int(self.wl.duration[i]), int(self.wl.deadline[i])
            return end <= deadline if self.shift.memorize else end < deadline
        return now < latest_release(int(self.guard_deadline[i]), remaining, self.shift.deadline_margin)

    def held_everywhere(self, i: int) -> bool:
        cls = 0 if self.runtime[i] - self.done_off[i] < SHORT_MS else 1
        return bool(self.hold_flags[:, cls].all())

    def hold(self, i: int, now: int) -> None:
        cls = 0 if self.runtime[i] - self.done_off[i] < SHORT_MS else 1
        self.status[i] = HELD
        self.held_since[i] = now
        self.held[cls].append(i)
        self.counters["held_tasks"] += 1
        if not self.compat:
            remaining = int(self.runtime[i] - self.done_off[i])
            g = latest_release(int(self.guard_deadline[i]), remaining, self.shift.deadline_margin)
            self.push(g, GUARD, i, int(self.version[i]))

    def unhold(self, i: int, now: int) -> None:
        waited = now - int(self.held_since[i])
        if self.was_paused[i]:
            self.paused[i] += waited
        else:
            self.deferred[i] += waited
        self.status[i] = WAITING
        self.queue.append(i)

    # -- events ----------------------------------------------------------------------------

    def arrive(self, i: int, now: int) -> None:
        if self.parents_left[i] > 0:  # arrives again when its last parent completes
            self.status[i] = BLOCKED
            return
        if not self.fits_somewhere(self.request(i)):
            self.status[i] = UNSCHEDULABLE
            self.counters["tasks_unschedulable"] += 1
            return
        if self.deferrable(i) and self.held_everywhere(i) and self.may_hold(i, now):
            self.hold(i, now)
        else:
            self.enqueue(i, now)

    def enqueue(self, i: int, now: int) -> None:
        """Into the queue. A deferrable task may still be kept off high-carbon sources there
        (``place_pass``), so the loop also wakes at its guard instant to lift that."""
        self.status[i] = WAITING
        self.queue.append(i)
        if self.deferrable(i) and not self.compat:
            g = latest_release(int(self.guard_deadline[i]), int(self.runtime[i] - self.done_off[i]),
                               self.shift.deadline_margin)
            if g > now:
                self.push(g, GUARD, i, int(self.version[i]))

    def complete(self, i: int, now: int) -> None:
        self.state.place(int(self.task_host[i]), self.request(i), -1)
        self.running.discard(i)
        self.segs.append((i, int(self.task_host[i]), int(self.seg_start[i]), int(self.done_off[i]),
                          int(self.runtime[i])))
        self.done_off[i] = self.runtime[i]
        self.status[i] = DONE
        self.finish[i] = now
        for c in self._kids[self._kid_start[i]: self._kid_start[i + 1]].tolist():
            self.parents_left[c] -= 1
            if self.parents_left[c] == 0 and self.status[c] == BLOCKED:
                self._unblocked.append(c)

    def pause(self, i: int, now: int) -> None:
        ran = now - int(self.seg_start[i])
        if ran <= 0:
            return
        self.state.place(int(self.task_host[i]), self.request(i), -1)
        self.running.discard(i)
        self.segs.append((i, int(self.task_host[i]), int(self.seg_start[i]), int(self.done_off[i]),
                          int(self.done_off[i]) + ran))
        self.done_off[i] += ran
        self.version[i] += 1
        self.was_paused[i] = True
        self.counters["pauses"] += 1
        if self.deferrable(i) and self.held_everywhere(i) and self.may_hold(i, now):
            self.hold(i, now)
        else:  # compat pauses every task: one it may not hold goes straight back in the queue
            self.enqueue(i, now)

    def carbon_change(self, now: int) -> None:
        rules = self.rules
        self._decided_at = now
        for c, trace in enumerate(self.hosts.traces):
            self.hold_flags[c] = rules.hold(c, trace, now)
            if self.shift.stopper is None or not rules.high(trace, now, c):
                continue
            for i in sorted(self.running):
                if self.hosts.cluster[self.task_host[i]] != c:
                    continue
                if self.compat or (self.deferrable(i) and self.may_hold(i, now)):
                    self.pause(i, now)
        self.release_unheld(now)

    def release_unheld(self, now: int) -> int:
        """Release the held tasks of each class that some source no longer holds; how many."""
        n = 0
        for cls in (0, 1):
            if not self.hold_flags[:, cls].all():
                released, self.held[cls][:] = list(self.held[cls]), []
                for i in sorted(released):
                    if self.status[i] == HELD:
                        self.unhold(i, now)
                        n += 1
        return n

    def tick(self, now: int) -> None:
        """A decision tick (default mode only): the hold state of every source is decided again
        with the carbon-change rule, from what the provider issues at ``now``, and the held
        tasks it no longer holds are released. The stopper is not run (it pauses at carbon
        changes only), and a tick at an instant already decided (a carbon change) is skipped."""
        if self._decided_at == now:
            return
        self._decided_at = now
        self.counters["tick_decisions"] += 1
        for c, trace in enumerate(self.hosts.traces):
            self.hold_flags[c] = self.rules.hold(c, trace, now)
        self.counters["tick_releases"] += self.release_unheld(now)

    def guard(self, i: int, version: int, now: int) -> None:
        if self.status[i] == HELD and version == self.version[i]:
            self.forced[i] = True
            self.counters["guard_releases"] += 1
            for lst in self.held:
                if i in lst:
                    lst.remove(i)
            self.unhold(i, now)

    def compat_recheck(self, now: int) -> None:
        """OpenDC re-checks every held task at each decision: release those out of slack."""
        for lst in self.held:
            for i in [j for j in lst if not self.may_hold(j, now)]:
                lst.remove(i)
                self.forced[i] = True
                self.unhold(i, now)

    def place_pass(self, now: int) -> None:
        self.counters["placement_passes"] += 1
        q = self.queue
        while q:
            i = q[0]
            allowed = None
            if self.deferrable(i) and not self.forced[i]:
                cls = 0 if self.runtime[i] - self.done_off[i] < SHORT_MS else 1
                ok = ~self.hold_flags[:, cls]
                if ok.all():
                    allowed = None
                elif ok.any() and (self.compat or self.may_hold(i, now)):
                    allowed = ok[self.hosts.cluster]
                elif ok.any():  # past its guard instant: any host, not only low-carbon ones
                    self.forced[i] = True
                    self.counters["guard_releases"] += 1
            h = self.place_policy.select(self.state, self.request(i), self.seed, allowed)
            if h < 0:
                return
            q.popleft()
            self.state.place(h, self.request(i))
            self.task_host[i] = h
            self.seg_start[i] = now
            if self.start[i] < 0:
                self.start[i] = now
            self.status[i] = RUNNING
            self.running.add(i)
            self.version[i] += 1
            self.push(now + int(self.runtime[i] - self.done_off[i]), FINISH, i, int(self.version[i]))

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> Schedule:
        wl = self.wl
        order = np.argsort(wl.submit, kind="stable")
        submits = wl.submit[order]
        if wl.n == 0:
            return self.result()
        t0, nxt = int(submits[0]), 0
        if self.shift:
            lo, hi = t0, int(submits[-1] + 4 * max(int(self.runtime.max()), 1) + 30 * 86_400_000)
            for trace in self.hosts.traces:
                if trace is not None:
                    for t in trace.change_points(lo, hi):
                        self.push(int(t), CARBON, 0)
            self.push(t0, CARBON, 0)
            if not self.compat:
                self.push(t0, TICK, 0)
        tick = int(self.shift.decision_interval_min * 60_000) if self.shift else 0
        finished = 0
        while nxt < order.size or self.events:
            t_evt = self.events[0][0] if self.events else None
            t_arr = int(submits[nxt]) if nxt < order.size else None
            now = min(t for t in (t_evt, t_arr) if t is not None)
            while self.events and self.events[0][0] == now:
                _, kind, i, ver = heapq.heappop(self.events)
                if kind == FINISH and ver == self.version[i] and self.status[i] == RUNNING:
                    self.complete(i, now)
                    finished += 1
                elif kind == CARBON:
                    if i == 0 and not (self.events and self.events[0][:2] == (now, CARBON)):
                        self.carbon_change(now)
                elif kind == GUARD:
                    self.guard(i, ver, now)
                elif kind == TICK and self.pending(nxt, order.size):
                    self.tick(now)
                    self.push(now + tick, TICK, 0)
            for c in self._unblocked:  # children whose last parent completed now
                self.arrive(c, now)
            self._unblocked.clear()
            while nxt < order.size and int(submits[nxt]) == now:
                self.arrive(int(order[nxt]), now)
                nxt += 1
            if self.compat and self.shift:
                self.compat_recheck(now)
            self.place_pass(now)
            if not self.pending(nxt, order.size):
                break
        return self.result()

    def pending(self, nxt: int, n: int) -> bool:
        return nxt < n or bool(self.queue) or bool(self.running) or any(self.held)

    def result(self) -> Schedule:
        s = np.array(self.segs, dtype=np.int64).reshape(-1, 5)
        counters = dict(self.counters)
        if self.rules:
            counters.update(self.rules.counters)
        status = np.where(self.status == UNSCHEDULABLE, UNSCHEDULABLE,
                          np.where(self.status == BLOCKED, BLOCKED, DONE)).astype(np.int8)
        counters["tasks_blocked"] = int((self.status == BLOCKED).sum())
        counters["tasks_never_finished"] = int(((self.status != DONE) & (self.status != UNSCHEDULABLE)
                                                & (self.status != BLOCKED)).sum())
        return Schedule(s[:, 0], s[:, 1], s[:, 2], s[:, 3], s[:, 4], self.start, self.finish,
                        self.task_host, self.deferred, self.paused, self.forced, status, counters)


def schedule(wl: Workload, hosts: Hosts, policy: Any, *, seed: int = 0, compat: bool = False,
             provider: Any = None) -> Schedule:
    """Run the event loop for one scenario."""
    return Loop(wl, hosts, policy, seed, compat, provider).run()
