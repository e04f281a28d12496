"""Episodes on Ray actors: N workers, each with its own environments and agent, on this machine or
on a cluster (``ray_address``).

A worker that dies (segfault, OOM, ``os._exit``) is replaced and its episode re-run up to
``config.retries`` times, then recorded as ``infra_error``; a worker that overruns the episode budget
(a hung agent, which a signal cannot interrupt off the main thread) is killed and replaced, and its
episode recorded as ``timeout``. Nothing is dropped silently.
"""

from __future__ import annotations

import os
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from evaluation.config import EvalConfig
from evaluation.episode import EpisodeRunner, Task, torch_threads

STARTUP_GRACE_S = 120.0  # a fresh worker imports torch and loads the agent before its first episode


class EpisodeWorker:
    """The body of a Ray actor: an ``EpisodeRunner`` that lives as long as the actor."""

    def __init__(self, config: dict[str, Any], out_dir: str) -> None:
        self.config = EvalConfig.model_validate(config)
        self.runner = EpisodeRunner(self.config, out_dir)

    def run(self, task: tuple[str, int, str]) -> dict[str, Any]:
        with torch_threads(self.config.agent_threads):  # the same policy as in-process
            return self.runner.run(Task(*task))

    def pid(self) -> int:
        return os.getpid()


def init_ray(cpus: int, address: str | None) -> None:
    """Join the cluster at ``address``, or start a local Ray with ``cpus`` CPUs (no dashboard); a
    no-op when Ray is already up."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(num_cpus=max(cpus, 1), include_dashboard=False, log_to_driver=False)


def schedulable_workers(asked: int) -> int:
    """How many one-CPU actors the Ray cluster can run now, at most ``asked`` (with a warning when fewer):
    an actor that can never be scheduled would hold its work forever, and a trainer's env runners may
    hold some of the cluster's CPUs."""
    import ray

    cpus = max(1, int(ray.available_resources().get("CPU", 1)))
    if asked > cpus:
        warnings.warn(f"{asked} workers asked for, the Ray cluster has {cpus} free CPU(s): using {cpus}", stacklevel=3)
    return min(asked, cpus)


def run_on_ray(
    todo: list[Task], config: EvalConfig, out: Path, agent_factory: Callable[[], Any] | None = None
) -> Iterator[dict[str, Any]]:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError, RayError

    if agent_factory is not None:
        raise ValueError("an agent_factory cannot be shipped to Ray workers: name the agent by its spec string")
    init_ray(config.workers, config.ray_address)
    remote = ray.remote(num_cpus=1, max_restarts=0)(EpisodeWorker)
    cfg = config.model_dump(mode="json")

    def spawn():
        return remote.remote(cfg, str(out.resolve()))

    budget = config.episode_timeout_s + 30.0
    queue = deque((t, 0) for t in todo)
    idle = [spawn() for _ in range(min(schedulable_workers(config.workers), len(todo)))]
    fresh = set(map(id, idle))
    pending: dict[Any, tuple[Any, Task, float, int]] = {}
    try:
        while queue or pending:
            while queue and idle:
                actor = idle.pop()
                task, attempt = queue.popleft()
                grace = STARTUP_GRACE_S if id(actor) in fresh else 0.0
                fresh.discard(id(actor))
                pending[actor.run.remote(tuple(task))] = (actor, task, time.monotonic() + grace, attempt)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                actor, task, _, attempt = pending.pop(ref)
                try:
                    rec = ray.get(ref, timeout=60)
                    idle.append(actor)
                    rec["attempts"] = attempt + 1
                    yield rec
                except (RayActorError, GetTimeoutError, RayError) as e:
                    ray.kill(actor, no_restart=True)
                    new = spawn()
                    fresh.add(id(new))
                    idle.append(new)
                    if attempt < config.retries:
                        queue.appendleft((task, attempt + 1))
                    else:
                        yield _lost(task, attempt + 1, f"worker died {attempt + 1} time(s): {type(e).__name__}: {e}")
            now = time.monotonic()
            for ref, (actor, task, started, attempt) in list(pending.items()):
                if now - started > budget:
                    pending.pop(ref)
                    ray.kill(actor, no_restart=True)
                    new = spawn()
                    fresh.add(id(new))
                    idle.append(new)
                    yield _lost(
                        task,
                        attempt + 1,
                        f"episode exceeded {config.episode_timeout_s:g} s; worker replaced",
                        status="timeout",
                    )
    finally:
        for actor, *_ in pending.values():
            ray.kill(actor, no_restart=True)
        for actor in idle:
            ray.kill(actor, no_restart=True)


def _lost(task: Task, attempts: int, error: str, status: str = "infra_error") -> dict[str, Any]:
    return {
        "key": task.key,
        "scenario": task.scenario,
        "seed": task.seed,
        "rig": task.rig,
        "status": status,
        "error": error,
        "attempts": attempts,
    }
