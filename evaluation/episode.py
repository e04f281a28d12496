"""One closed-loop episode of one agent, turned into one journal record, whatever goes wrong.

``EpisodeRunner`` owns an environment per camera rig and one agent, and runs tasks
``(scenario, seed, rig)``. Every episode ends in a record with a status:

- ``ok``: the episode ran to its end (route complete, collision, deviation or scenario time);
- ``agent_error``: the agent raised, or returned a trajectory with NaN / the wrong shape;
- ``timeout``: the episode overran its wall-clock budget;
- ``infra_error``: the suite itself failed (env construction, a crashed worker after its retries).

``agent_error`` and ``timeout`` records keep the metrics of the episode up to the failure (as the
CARLA Leaderboard scores a crashed agent's route up to the crash), so they count against the agent.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from envs import InvalidActionError, LoopDriveEnv, World, make_env
from envs.interface import DEFAULT_OBSERVATIONS
from envs.sensors import VideoRecorder
from evaluation.config import EvalConfig
from evaluation.steering import episode_sums
from loopdrive.seeding import derive_seed
from rewards.consistency import consistency_score
from rewards.scene import scene_facts
from scenarios.routes import RouteBankSpec

STATUSES = ("ok", "agent_error", "timeout", "infra_error")
SCORED = ("ok", "agent_error", "timeout")  # the agent's episodes; an infra_error is the suite's, never scored
TRACE_EVERY = 5  # world steps between points of the stored ego trace (0.5 s)
MAX_REASONING_SAMPLES = 3


class Task(NamedTuple):
    scenario: str
    seed: int
    rig: str

    @property
    def key(self) -> str:
        return f"{self.scenario}|{self.seed}|{self.rig}"


class EpisodeTimeout(BaseException):
    """The episode's wall-clock budget ran out. A ``BaseException``, so an agent's ``except Exception``
    cannot swallow it; and it is raised again every 0.5 s until the episode ends (an agent that
    catches everything cannot outlast it either)."""


class AgentFailure(Exception):
    """Wraps what the agent raised, so the runner can tell it from a failure of the suite."""


def episode_seed(task: Task) -> int:
    """A seed for the agent's own randomness that depends only on the task (not on the worker)."""
    return derive_seed(task.seed, task.scenario)


class EpisodeRunner:
    """Runs tasks in this process; reused across episodes (one env per rig, one agent)."""

    def __init__(
        self, config: EvalConfig, out_dir: str | Path | None = None, agent_factory: Callable[[], Any] | None = None
    ) -> None:
        from agents import load_agent

        self.config = config
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.agent = (agent_factory or (lambda: load_agent(config.agent)))()
        if config.backend == "carla" and getattr(self.agent, "privileged", False):
            raise ValueError(
                f"agent {config.agent!r} is privileged (it reads the embedded world's state) and cannot "
                "drive on CARLA; evaluate a learned agent or a baseline there"
            )
        self.envs: dict[str, LoopDriveEnv] = {}

    def env(self, rig: str) -> LoopDriveEnv:
        if rig not in self.envs:
            c = self.config
            wanted = tuple(getattr(self.agent, "observations", None) or DEFAULT_OBSERVATIONS)
            if c.backend == "worldmodel" and "cameras" not in wanted:  # the backend is a camera model
                wanted += ("cameras",)
            if c.backend == "carla":
                backend_args = {
                    "carla_host": c.carla_host,
                    "carla_port": c.carla_port,
                    "carla_container": c.carla_container,
                }
            else:
                backend_args = {"world_model": c.world_model, "world_model_noise": c.world_model_noise}
            self.envs[rig] = make_env(
                bank=c.bank,
                split=c.split,
                rig=rig,
                observations=tuple(wanted),
                decision_every=c.decision_every,
                n_frames=c.n_frames,
                frame_every=c.frame_every,
                camera_size=tuple(c.camera_size),
                leaderboard_version=c.leaderboard_version,
                rewards=c.rewards,
                # route files are scored as the Leaderboard scores them: a collision is a penalty, the
                # route goes on (a bank's episode ends at the ego's first at-fault collision)
                terminate_on_collision=not RouteBankSpec.names(c.bank),
                render_mode="rgb_array" if c.video else None,
                backend=c.backend,
                **backend_args,
            )
        return self.envs[rig]

    def run(self, task: Task) -> dict[str, Any]:
        """Run one episode; never raises except KeyboardInterrupt."""
        t0 = time.perf_counter()
        self._current: dict[str, Any] = {}
        self._started = False
        rec: dict[str, Any] = {"key": task.key, "scenario": task.scenario, "seed": task.seed, "rig": task.rig}
        try:
            env = self.env(task.rig)
        except Exception as e:
            return rec | _failure("infra_error", e)
        try:
            rec |= self._drive(env, task, t0)
            rec["status"] = "ok"
        except EpisodeTimeout:
            rec |= self._partial(env) | {
                "status": "timeout",
                "error": f"episode exceeded {self.config.episode_timeout_s:g} s of wall time",
            }
        except AgentFailure as e:
            cause = e.__cause__ or e
            rec |= self._partial(env) | {"status": "agent_error", "error": _describe(cause)}
            rec["traceback"] = "".join(traceback.format_exception(cause)[-3:])[-2000:]
        except InvalidActionError as e:
            rec |= self._partial(env) | {"status": "agent_error", "error": f"invalid action: {e}"}
        except KeyboardInterrupt:
            raise
        except Exception as e:
            rec |= self._partial(env) | _failure("infra_error", e)
        finally:
            env.step_hooks.clear()
        rec["wall_s"] = round(time.perf_counter() - t0, 3)
        return rec

    # --- one episode -----------------------------------------------------------------------------------------
    def _drive(self, env: LoopDriveEnv, task: Task, t0: float) -> dict[str, Any]:
        scn = next((s for s in env.scenarios if s.id == task.scenario), None)
        if scn is None:
            raise KeyError(f"scenario {task.scenario!r} is not in bank {env.bank_name!r}")
        self._current = {"family": scn.family, "tags": list(scn.tags)}
        obs, _ = env.reset(seed=task.seed, options={"scenario": task.scenario})
        self._started = True
        env.render_seconds = 0.0
        agent, world = self.agent, env.world
        info_for_agent = {"scenario": scn, "world": world, "seed": episode_seed(task), "decision_s": env.decision_s}
        timing = {"agent": 0.0, "env": 0.0, "metrics": 0.0, "video": 0.0}
        reasoning: list[dict[str, Any]] = []
        consistency: list[float] = []
        steering: list[tuple[np.ndarray, np.ndarray, int]] = []  # (route ahead, plan, pose index)
        caption: list[str | None] = [None]
        recorder = None
        if self.config.video and self.out_dir is not None:
            video_path = self.out_dir / "videos" / f"{task.scenario}__s{task.seed}__{task.rig}.mp4"
            recorder = VideoRecorder(video_path)
            env.step_hooks.append(lambda e: _record(e, recorder, caption[0], timing))
        info: dict[str, Any] = {}
        try:
            with _deadline(self.config.episode_timeout_s) as deadline:  # the agent's time starts here
                t = time.perf_counter()
                try:
                    agent.reset(info_for_agent)
                except Exception as e:
                    raise AgentFailure() from e
                timing["agent"] += time.perf_counter() - t
                done, decisions = False, 0
                while not done:
                    t = time.perf_counter()
                    try:
                        out = agent.act(obs)
                    except Exception as e:
                        raise AgentFailure() from e
                    if deadline.expired:  # the agent swallowed the time-out (or no signal reached it)
                        raise EpisodeTimeout()
                    trajectory = _trajectory_of(out)
                    t1 = time.perf_counter()
                    timing["agent"] += t1 - t
                    decisions += 1
                    text = getattr(out, "reasoning", None)
                    caption[0] = text = text if isinstance(text, str) else None
                    if text:
                        if self.config.consistency and isinstance(world, World):  # (the critic reads the scene)
                            consistency.append(self._consistency(world, text, trajectory))
                        if len(reasoning) < MAX_REASONING_SAMPLES and all(r["text"] != text for r in reasoning):
                            reasoning.append({"t": round(world.t, 2), "text": text})
                    road, pose_index = env.route_ahead(), len(env.ego_track) - 1
                    t2 = time.perf_counter()
                    timing["metrics"] += t2 - t1
                    obs, _, terminated, truncated, info = env.step(trajectory)
                    timing["env"] += time.perf_counter() - t2
                    plan = np.asarray(trajectory, np.float64)  # (checked by the step)
                    if plan.ndim == 2 and plan.shape[1] >= 3:  # a trajectory (not a control action)
                        steering.append((road, plan, pose_index))
                    done = terminated or truncated
        finally:
            if recorder is not None:
                recorder.close()
        t = time.perf_counter()
        rec = self._partial(env, info.get("metrics"))
        poses = np.array([(e.x, e.y, e.yaw) for e in env.ego_track])
        rec["steering"] = episode_sums(steering, poses)._asdict()
        timing["metrics"] += time.perf_counter() - t
        timing["render"] = env.render_seconds
        timing["env"] -= env.render_seconds + timing["video"]
        rec |= {
            "decisions": decisions,
            "reasoning": reasoning,
            "consistency": float(np.mean(consistency)) if consistency else None,
            "timing": {k: round(v, 4) for k, v in timing.items()},
            "video": str(recorder.path.relative_to(self.out_dir)) if recorder is not None else None,
        }
        return rec

    def _consistency(self, world: Any, text: str, trajectory: np.ndarray) -> float:
        try:
            causes = scene_facts(world).causes
            return consistency_score(text, trajectory, causes, speed0=float(world.state.speed[0])).overall
        except Exception:  # a malformed trajectory is reported by the env's own check
            return 0.0

    def _partial(self, env: LoopDriveEnv, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        """The episode's metrics so far (at its end, or at the failure)."""
        base = dict(self._current)
        if not self._started:
            return base
        m = metrics or env.episode_metrics()
        track = env.ego_track
        lateral = [abs(e.lateral) for e in track]
        trace = [[round(e.x, 2), round(e.y, 2)] for e in track[::TRACE_EVERY]] + [
            [round(track[-1].x, 2), round(track[-1].y, 2)]
        ]
        return base | {
            "score": m["leaderboard"]["score"],
            "suites": m["suites"],
            "infractions": m["infractions"],
            "events": m["events"],
            "reward_returns": m["reward_returns"],
            "stats": {k: v for k, v in m.items() if isinstance(v, float)},
            "lateral_error_m": float(np.mean(lateral)) if lateral else 0.0,
            "trace": trace,
            "ending": m.get("ending"),  # (at the episode's end; None for a failure's metrics so far)
        }


@contextmanager
def torch_threads(n: int):
    """Run the block with torch on ``n`` threads (when torch is loaded: an agent that uses it is),
    then restore. CPU results depend on the thread count (reduction order), so an evaluation uses the
    same count in-process and in every worker, and gets the same numbers for any worker count."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _trajectory_of(out: Any) -> Any:
    """The plan in an agent's answer: ``AgentOutput.trajectory`` (the env checks its type, shape and
    values); anything else is the agent's error, named."""
    trajectory = getattr(out, "trajectory", None)
    if trajectory is None:
        raise InvalidActionError(f"act() must return an AgentOutput, got {type(out).__name__}")
    return trajectory


def _record(env: LoopDriveEnv, recorder: VideoRecorder, caption: str | None, timing: dict[str, float]) -> None:
    t = time.perf_counter()
    recorder.add(env.video_frame(caption))
    timing["video"] += time.perf_counter() - t


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:1000]


def _failure(status: str, e: BaseException) -> dict[str, Any]:
    return {"status": status, "error": _describe(e), "traceback": "".join(traceback.format_exception(e)[-3:])[-2000:]}


class _deadline:
    """Raise ``EpisodeTimeout`` in this thread after ``seconds``, and again every ``REPEAT_S`` until the
    block ends (SIGALRM; a no-op off the main thread, where a Ray pool enforces the budget by replacing
    the worker). ``expired`` tells the runner the budget is gone even if an agent swallowed the raise."""

    REPEAT_S = 0.5

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
        self.ends = time.monotonic() + seconds

    def __enter__(self) -> _deadline:
        self.ends = time.monotonic() + self.seconds
        self.active = True
        if self.armed:
            self.previous = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds, self.REPEAT_S)
        return self

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.ends

    def _fire(self, signum, frame) -> None:
        if self.active:  # (a signal already on its way when the block ended is ignored)
            raise EpisodeTimeout()

    def __exit__(self, *exc) -> None:
        self.active = False
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)


def json_safe(value: Any) -> Any:
    """Non-finite floats become None (JSON has no Infinity), numpy scalars plain numbers."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
