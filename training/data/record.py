"""Driving data in zarr: ``collect`` records labelled rollouts, ``DrivingDataset`` reads them for SFT.

One sample per agent decision: the camera frames of the rig (resized to the VLA's image size, with
the same interpolation the model uses), ego history and state, the route and its command, the
future the car then actually drove (``target``, 64 x (x, y, yaw) in the ego frame at the decision; for
the decisions of an episode's last 6.4 s, driven on past its end where the road goes on, with ``run_out``),
the scene facts, the meta-actions detected on that future, the reasoning a teacher wrote for them
(plus the agent's own), and the privileged perception targets (``agents.vla.perception.PERCEPTION_TARGETS``).
Samples whose reasoning disagrees with the labels are filtered out and counted. Episodes that end in
an at-fault collision or off the road are not demonstrations: dropped.

Arrays grow along the sample axis and are written in whole chunks. The group's attributes record
which episodes are complete, so ``collect`` resumes after a kill by cutting the arrays back to the
last complete episode and running only the episodes that are missing. ``dataset_card.json`` beside
the arrays describes the rig, the counts and the label statistics.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from tqdm import tqdm

from agents.vla.perception import perception_targets
from envs.sensors.resize import resize_frames
from training.data.dataset import (
    EVERY_CHUNK_STORED,
    FORMAT,
    NUMERIC,
    OPTIONAL_NUMERIC,
    TEXT,
    DatasetError,
    card_path,
    check_format,
    dataset_card,
)
from training.data.labels import ConsistencyFilter, label_meta_actions, make_teacher
from training.data.settings import CollectSettings

HORIZON = 64


def _episodes(cfg: CollectSettings) -> list[tuple[str, int, bool]]:
    from scenarios import load_bank

    bank = load_bank(cfg.bank, split=cfg.split)
    ids = [s.id for s in bank.scenarios if cfg.scenarios is None or s.id in cfg.scenarios]
    if cfg.scenarios is not None and (missing := sorted(set(cfg.scenarios) - set(ids))):
        raise DatasetError(f"scenarios {missing[:5]} are not in bank {cfg.bank!r} split {cfg.split!r}")
    eps = [(sid, seed, False) for sid in ids for seed in range(cfg.seeds)]
    n_perturbed = int(round(cfg.perturb_fraction * len(eps)))
    rng = np.random.default_rng(0)
    eps += [(sid, seed, True) for sid, seed, _ in (eps[i] for i in sorted(rng.permutation(len(eps))[:n_perturbed]))]
    return eps[: cfg.max_episodes] if cfg.max_episodes else eps


def future_in_ego_frame(track: Sequence[Any], k: int) -> np.ndarray | None:
    """The executed poses after step ``k`` (64 of them) in the ego frame at ``k``; None if too short.

    The yaw channel is the direction of motion (the unicycle convention of the VLA's action space),
    not the body yaw: a bicycle model's body turns ahead of its path by the slip angle, and fitting
    unicycle actions to body yaw would bend every target in turns.
    """
    if k + HORIZON >= len(track):
        return None
    e = track[k]
    seg = track[k : min(len(track), k + HORIZON + 2)]
    xy = np.array([(s.x, s.y) for s in seg], float)
    body = np.unwrap(np.array([s.yaw for s in seg], float))
    vel = np.gradient(xy, axis=0)
    moving = np.hypot(vel[:, 0], vel[:, 1]) > 0.05  # 0.5 m/s at 10 Hz
    heading = np.where(moving, np.arctan2(vel[:, 1], vel[:, 0]), body)
    heading = body + (heading - body + np.pi) % (2 * np.pi) - np.pi  # stay on the body yaw's branch
    c, s = np.cos(e.yaw), np.sin(e.yaw)
    dx, dy = xy[1 : 1 + HORIZON, 0] - e.x, xy[1 : 1 + HORIZON, 1] - e.y
    yaw = np.unwrap(heading[1 : 1 + HORIZON] - e.yaw)
    return np.stack([c * dx + s * dy, -s * dx + c * dy, yaw], 1).astype(np.float32)


class _Writer:
    """Appends samples to the zarr group in whole chunks; commits whole episodes."""

    def __init__(self, group: zarr.Group, chunk: int) -> None:
        self.g, self.chunk = group, chunk
        self.buffer: list[dict[str, Any]] = []
        self.pending_episodes: list[tuple[str, int, CollectStats]] = []  # (key, samples, its counts)
        self.stats = CollectStats.from_attrs(group.attrs.get("stats"))  # of the committed episodes

    def _ensure(self, sample: dict[str, Any]) -> None:
        mark = {EVERY_CHUNK_STORED: True}  # so a reader can tell a deleted chunk from an all-zero one
        fresh = "target" not in self.g  # a dataset resumed from before an optional array stays without it
        for name, dtype in (NUMERIC | (OPTIONAL_NUMERIC if fresh else {})).items():
            if name not in self.g:
                shape = np.asarray(sample[name]).shape
                self.g.create_array(name, shape=(0, *shape), chunks=(self.chunk, *shape), dtype=dtype, attributes=mark)
        for name in TEXT:
            if name not in self.g:
                self.g.create_array(name, shape=(0,), chunks=(self.chunk,), dtype=str, attributes=mark)

    def add_episode(self, key: str, samples: list[dict[str, Any]], stats: CollectStats) -> None:
        if samples:
            self._ensure(samples[0])
        self.buffer += samples
        self.pending_episodes.append((key, len(samples), stats))
        while len(self.buffer) >= self.chunk:
            self._write(self.chunk)

    def flush(self) -> None:
        if self.buffer:
            self._write(len(self.buffer))
        self._commit()

    def _write(self, n: int) -> None:
        rows, self.buffer = self.buffer[:n], self.buffer[n:]
        start = int(self.g.attrs.get("written", 0))
        numeric = NUMERIC | {k: v for k, v in OPTIONAL_NUMERIC.items() if k in self.g}
        for name in (*numeric, *TEXT):
            arr = self.g[name]
            arr.resize((start + n, *arr.shape[1:]))
            if name in numeric:
                arr[start : start + n] = np.stack([np.asarray(r[name], dtype=numeric[name]) for r in rows])
            else:
                arr[start : start + n] = np.array([r[name] for r in rows], dtype=object)
        self.g.attrs["written"] = start + n
        self._commit()

    def _commit(self) -> None:
        """Mark episodes complete whose samples are all on disk, and count them, in one update: the
        counts always describe exactly the complete episodes, so a resumed collect counts each once."""
        written = int(self.g.attrs.get("written", 0))
        done = list(self.g.attrs.get("episodes_complete", []))
        n_complete = int(self.g.attrs.get("n_complete", 0))
        while self.pending_episodes and n_complete + self.pending_episodes[0][1] <= written:
            key, n, stats = self.pending_episodes.pop(0)
            done.append(key)
            n_complete += n
            self.stats.add(stats)
        self.g.attrs.update({"episodes_complete": done, "n_complete": n_complete, "stats": self.stats.to_attrs()})


def collect(cfg: CollectSettings, out: str | Path, progress: bool | None = None) -> dict[str, Any]:
    """Record (or finish recording) the dataset at ``out``; returns the dataset card.

    The episodes are driven in-process or, with ``cfg.workers``, on that many Ray actors; either way
    they are written in order, each with the agent on ``cfg.agent_threads`` torch threads, so the data
    is the same for any worker count (and a collection resumed with another count continues it)."""
    from agents import trained_observation

    # settings updated with model_copy are checked too
    cfg = CollectSettings.model_validate(cfg.model_dump(include=set(CollectSettings.model_fields)))
    trained = trained_observation(cfg.agent)  # a VLA that drives sees what it learnt from
    if trained is not None and (why := trained.other_frames(cfg.n_frames, cfg.agent, cfg.frame_every)):
        raise DatasetError(
            f"n_frames: {why}; collect with n_frames = {trained.n_frames}, frame_every = {trained.frame_every}"
        )
    out = Path(out)
    group = zarr.open_group(out, mode="a")
    settings = _settings(cfg)
    if "format" in group.attrs:
        check_format(out, group.attrs["format"])
    stored = _settings(CollectSettings()) | dict(group.attrs.get("config", {}))  # later settings: their defaults
    if "config" in group.attrs and {k: stored[k] for k in settings} != settings:
        raise DatasetError(f"{out} was collected with other settings; collect into a new path")
    group.attrs.update({"format": FORMAT, "config": settings})
    n_complete = int(group.attrs.get("n_complete", 0))
    for name in (*NUMERIC, *OPTIONAL_NUMERIC, *TEXT):  # drop samples of episodes that a kill left half-written
        if name in group and group[name].shape[0] > n_complete:
            group[name].resize((n_complete, *group[name].shape[1:]))
    group.attrs["written"] = n_complete
    done = set(group.attrs.get("episodes_complete", []))
    todo = [(i, e) for i, e in enumerate(_episodes(cfg)) if _key(e) not in done]

    writer = _Writer(group, cfg.chunk)
    recorded = _on_workers(cfg, todo) if cfg.workers and todo else _in_process(cfg, todo)
    bar = tqdm(
        total=len(todo), desc=f"collect {cfg.agent}", unit="ep", disable=None if progress is None else not progress
    )
    with zarr.config.set({"array.write_empty_chunks": True}):  # every chunk on disk, all-zero ones too
        # strict: the episodes' generator is run to its end, where a worker pool is taken down
        for (_, episode), (samples, stats) in zip(todo, recorded, strict=True):
            writer.add_episode(_key(episode), samples, stats)
            bar.update(1)
        writer.flush()
    bar.close()
    card = dataset_card(out)
    card_path(out).write_text(json.dumps(card, indent=1))
    return card


class EpisodeRecorder:
    """What recording an episode takes (an env, the agent, the DAgger labeller, the teacher and the
    consistency critic), built once per process: in ``collect``'s own, or in each Ray actor's."""

    def __init__(self, cfg: CollectSettings) -> None:
        import envs  # noqa: F401
        from agents import load_agent
        from envs import LoopDriveEnv

        self.cfg = cfg
        self.env = LoopDriveEnv(
            bank=cfg.bank,
            split=cfg.split,
            rig=cfg.rig,
            camera_size=tuple(cfg.camera_size),
            n_frames=cfg.n_frames,
            frame_every=cfg.frame_every,
            decision_every=cfg.decision_every,
            observations=("cameras", "ego_history", "ego_state", "route", "command"),
        )
        self.agent = load_agent(cfg.agent)
        self.labeller = None
        if cfg.target == "expert" or cfg.closer_lead or cfg.offset_ego:
            from training.data.dagger import ExpertLabeller

            self.labeller = ExpertLabeller(cfg.bank, cfg.split, cfg.decision_every, run_out=cfg.run_out)
        self.teacher = make_teacher(cfg.teacher)
        self.critic = ConsistencyFilter(cfg.filter_threshold).critic

    def record(self, index: int, episode: tuple[str, int, bool]) -> Recorded:
        """Episode number ``index`` of the collection: its samples and its counts."""
        from evaluation.episode import torch_threads
        from rewards.scene import scene_facts

        sid, seed, perturbed = episode
        filt = ConsistencyFilter(self.cfg.filter_threshold, self.critic)  # counts this episode's samples
        with torch_threads(self.cfg.agent_threads):
            return _rollout(
                self.env,
                self.agent,
                sid,
                seed,
                perturbed,
                index,
                self.cfg,
                self.teacher,
                filt,
                scene_facts,
                self.labeller,
            )


def _in_process(cfg: CollectSettings, todo: list[tuple[int, tuple[str, int, bool]]]) -> Iterator[Recorded]:
    if not todo:  # a finished collection builds no env
        return
    recorder = EpisodeRecorder(cfg)
    for index, episode in todo:
        yield recorder.record(index, episode)


def _on_workers(cfg: CollectSettings, todo: list[tuple[int, tuple[str, int, bool]]]) -> Iterator[Recorded]:
    """The episodes on ``cfg.workers`` Ray actors (one CPU each), yielded in order. A worker that dies
    stops the collection with the episode named; the episodes before it are kept, and running it again
    resumes from there. A Ray this started is shut down at the end, so that its idle processes do not
    share the cores with the training that follows."""
    import ray
    from ray.util import ActorPool

    from evaluation.distributed import init_ray, schedulable_workers

    started = not ray.is_initialized()
    init_ray(cfg.workers, None)
    remote = ray.remote(num_cpus=1, max_restarts=0)(EpisodeRecorder)
    actors = [remote.remote(cfg) for _ in range(min(schedulable_workers(cfg.workers), len(todo)))]
    try:
        results = ActorPool(actors).map(lambda actor, task: actor.record.remote(*task), todo)
        for index, episode in todo:
            try:
                yield next(results)
            except ray.exceptions.RayError as e:
                raise DatasetError(f"collect: episode {index} ({_key(episode)}) failed on a worker: {e}") from e
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        if started:
            ray.shutdown()


def _settings(cfg: CollectSettings) -> dict[str, Any]:
    """The settings as the group's attributes store them (JSON: tuples become lists), without the
    worker count, which changes how fast the data comes, not what it is."""
    return cfg.model_dump(mode="json", exclude={"workers"})


def _key(episode: tuple[str, int, bool]) -> str:
    sid, seed, perturbed = episode
    return f"{sid}|{seed}|{'p' if perturbed else 'n'}"


def _rollout(
    env, agent, sid, seed, perturbed, index, cfg, teacher, filt, scene_facts, labeller=None
) -> tuple[list[dict[str, Any]], CollectStats]:
    """One episode's samples and its counts. With ``target = "expert"`` (DAgger) the targets are the
    labeller's: the expert's futures from the agent's states, and an episode the agent crashed is kept:
    its states are the ones the data lacks. A branch's sample (``closer_lead``, ``offset_ego``) is labelled
    so in any collection."""
    options: dict[str, Any] = {"scenario": sid}
    if perturbed:
        rng = np.random.default_rng(1000 + index)
        options["ego_offset"] = (
            rng.uniform(-1, 1) * cfg.perturb_lateral_m,
            np.radians(rng.uniform(-1, 1) * cfg.perturb_heading_deg),
        )
    obs, _ = env.reset(seed=seed, options=options)
    world = env.world
    agent.reset({"scenario": env.scenario, "world": world, "seed": seed, "decision_s": env.decision_s})
    closer_draws = np.random.default_rng(2000 + index)  # the branches' draws: per episode, any worker count
    offset_draws = np.random.default_rng(3000 + index)
    dagger = cfg.target == "expert"
    declined: Counter = Counter()  # branches drawn where the labeller's expert would not drive on as the driver
    decisions, done, info, n_decisions = [], False, {}, 0
    while not done:
        out = agent.act(obs)
        facts = scene_facts(world)
        labelled = dagger and n_decisions % cfg.label_every == 0
        n_decisions += 1
        decisions.append(
            {
                "label": labeller.label(env.snapshot(), seed) if labelled else None,
                "k": len(env.ego_track) - 1,
                "obs": obs,
                "facts": facts,
                "reasoning": out.reasoning or "",
                "plan": np.asarray(out.trajectory, np.float32),
                "perturbed": perturbed,
                "branch": None,
            }
        )
        if labelled or not dagger:  # in DAgger's data only beside a labelled decision
            # (a demonstration's branch needs the expert to drive on from here as its driver does; DAgger's
            # own label here is the expert's already)
            branching = _Branching(env, scene_facts, labeller, seed, None if dagger else out.trajectory, declined)
            closer = _closer_lead(branching, facts, closer_draws, cfg.closer_lead)
            offset = _offset_ego(branching, offset_draws, cfg)
            decisions += [branch for branch in (closer, offset) if branch is not None]
        obs, _, terminated, truncated, info = env.step(out.trajectory)
        done = terminated or truncated
    m = info["metrics"]
    bad = m["at_fault_collisions"] > 0 or m["events"].get("offroad", 0) > 0
    stats = CollectStats(episodes=1, families=Counter([env.scenario.family]), branches_declined=declined)
    if bad and not dagger:
        stats.dropped_episodes += 1
        return [], stats
    track = env.ego_track
    if cfg.run_out and cfg.target == "executed":  # the last decisions' futures, driven on past the end
        track = track + env.run_out(lambda o: agent.act(o).trajectory, HORIZON)
    samples = []
    for d in decisions:
        if d["branch"] is not None:
            stats.branches[d["branch"]] += 1
        if dagger or d["branch"] is not None:
            if d["label"] is None:  # not a labelled decision (label_every)
                continue
            if d["label"].failed:
                stats.expert_failed += 1
                continue
            target = d["label"].target
            ran_out = d["label"].ran_out
        elif cfg.target == "plan":
            target, ran_out = d["plan"], False
        else:
            target = future_in_ego_frame(track, d["k"])
            ran_out = d["k"] + HORIZON >= len(env.ego_track)
        if target is None:
            stats.short_future += 1
            continue
        o = d["obs"]
        speed0 = float(o["ego_state"][0])
        meta = label_meta_actions(target, speed0)
        causes = d["facts"].causes
        reasoning = teacher.write(meta, causes, d["facts"].to_dict())
        keep, score = filt(reasoning, meta, causes)
        if not keep:
            continue
        stats.run_out += ran_out
        stats.meta_actions.update(meta)
        stats.causes.update(causes)
        stats.commands[int(o["command"])] += 1
        samples.append(
            {
                "cameras": resize_frames(o["cameras"], tuple(cfg.image_size)),
                "ego_history": o["ego_history"],
                "ego_state": o["ego_state"],
                "route": o["route"],
                "command": int(o["command"]),
                "target": target,
                "plan": d["plan"],
                "speed0": speed0,
                "episode": index,
                "t": d["k"] * 0.1,
                "consistency": score,
                "perturbed": d["perturbed"],
                "perception": perception_targets(d["facts"]),
                "scenario": sid,
                "reasoning": reasoning,
                "agent_reasoning": d["reasoning"],
                "meta_actions": json.dumps(sorted(meta)),
                "causes": json.dumps(sorted(causes)),
            }
        )
    stats.kept, stats.rejected = filt.kept, filt.rejected
    return samples, stats


CLOSER_LEAD_MIN_GAP_M = 2.0  # the nearest a closer lead is put (bumper to bumper)
# ... and the farthest: the probe reads gaps beyond 15-20 m about right and nearer ones in the policy's own
# states badly (docs/experiments/rl.md, stops 70 and 74)
CLOSER_LEAD_MAX_GAP_M = 20.0


def _closer_lead(branch: _Branching, facts, draws: np.random.Generator, share: float) -> dict[str, Any] | None:
    """With probability ``share`` where a car is ahead, a branch of this decision with that car moved back
    along its lane to a gap drawn uniformly between ``CLOSER_LEAD_MIN_GAP_M`` and its own (at most
    ``CLOSER_LEAD_MAX_GAP_M``): the decision's record there with the expert's label from there. None where no
    car is ahead, the draw says no, or the world cannot move that car."""
    lead = facts.lead_vehicle
    if not share or lead is None or lead["gap"] <= CLOSER_LEAD_MIN_GAP_M:
        return None
    farthest = min(lead["gap"], CLOSER_LEAD_MAX_GAP_M)
    take, gap = draws.random() < share, draws.uniform(CLOSER_LEAD_MIN_GAP_M, farthest)  # both drawn: one stream
    env = branch.env
    if not take or not env.world.movable(lead["id"]):
        return None
    return branch.take(lambda: env.move_actor(lead["id"], gap - lead["gap"]), "closer_lead")


def _offset_ego(branch: _Branching, draws: np.random.Generator, cfg: CollectSettings) -> dict[str, Any] | None:
    """With probability ``cfg.offset_ego``, a branch of this decision with the ego moved sideways and
    turned (drawn uniformly within ``offset_ego_lateral_m`` and ``offset_ego_heading_deg`` either way, its
    history carried along): the decision's record there with the expert's label from there, its way back
    to the lane. As in DART, these are the states a policy's small errors lead to, on both sides of the lane
    and anywhere on the route, with the way back; the expert's data holds few (stop 82: a route more than
    1 m to the right was an overtake in 362 of 363 samples, where the expert stays out). None where the
    draw says no or the moved ego would be off the road or touching another."""
    if not cfg.offset_ego:
        return None
    take = draws.random() < cfg.offset_ego
    lateral = draws.uniform(-1, 1) * cfg.offset_ego_lateral_m  # all three drawn: one stream
    heading = np.radians(draws.uniform(-1, 1) * cfg.offset_ego_heading_deg)
    if not take:
        return None
    return branch.take(lambda: branch.env.shift_ego(lateral, heading), "offset_ego")


@dataclass
class _Branching:
    """What a branch of one decision needs: the env at the decision, the expert that labels it, and the
    driver's plan there (None in DAgger's data, where the decision's own label is the expert's)."""

    env: Any
    scene_facts: Callable
    labeller: Any
    seed: int
    driven: np.ndarray | None
    declined: Counter
    _continues: bool | None = field(default=None, init=False)  # plans_as's verdict, once per decision

    def _expert_continues(self, decision: dict[str, Any]) -> bool:
        """Whether the labeller's expert at the decision plans as the driver did (always, in DAgger's data);
        asked once, however many branches the decision has."""
        if self._continues is None:
            self._continues = self.driven is None or self.labeller.plans_as(decision, self.driven, self.seed)
        return self._continues

    def take(self, move: Callable[[], dict[str, Any] | None], kind: str) -> dict[str, Any] | None:
        """The decision's record in a branch: ``move()`` changes the world and returns the observation there
        (None: it could not), the expert labels it from there (no plan: the driver did not drive there), and
        the env is back at the decision afterwards, so the episode goes on unchanged.

        In a demonstration the branch is declined (counted in ``declined``) where a fresh expert at the
        decision would not plan as the driver did: it knows nothing of a manoeuvre under way, and from an
        overtake half done it turns back in; its label there would teach another decision than the one
        the data shows (stop 84: so in 25% of the expert's decisions in ``overtake``, 13% in ``lead_brake``)."""
        env = self.env
        decision = env.snapshot()
        if not self._expert_continues(decision):
            self.declined[kind] += 1
            return None
        obs = move()
        record = None
        if obs is not None:
            record = {
                "label": self.labeller.label(env.snapshot(), self.seed),
                "k": len(env.ego_track) - 1,
                "obs": obs,
                "facts": self.scene_facts(env.world),
                "reasoning": "",
                "plan": np.full((HORIZON, 3), np.nan, np.float32),
                "perturbed": True,
                "branch": kind,
            }
        env.restore(decision)
        return record


@dataclass
class CollectStats:
    """What a collect counted: episodes (and those dropped as not demonstrations), samples without a
    full future and those whose future was driven on past the episode's end (``run_out``), DAgger labels
    where the expert failed, the branches recorded (``closer_lead``, ``offset_ego``; before the filter) and
    those declined where the expert would not drive on as the driver,
    families, meta-actions, causes, commands, and the consistency filter's verdicts."""

    episodes: int = 0
    dropped_episodes: int = 0
    short_future: int = 0
    run_out: int = 0
    expert_failed: int = 0
    branches: Counter = field(default_factory=Counter)
    branches_declined: Counter = field(default_factory=Counter)
    families: Counter = field(default_factory=Counter)
    meta_actions: Counter = field(default_factory=Counter)
    causes: Counter = field(default_factory=Counter)
    commands: Counter = field(default_factory=Counter)
    kept: int = 0
    rejected: Counter = field(default_factory=Counter)

    def add(self, other: CollectStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @classmethod
    def from_attrs(cls, d: dict[str, Any] | None) -> CollectStats:
        d = d or {}
        counts = {
            k: d[k] for k in ("episodes", "dropped_episodes", "short_future", "run_out", "expert_failed") if k in d
        }
        out = cls(**counts, kept=d.get("filter", {}).get("kept", 0))
        out.rejected.update(d.get("filter", {}).get("rejected_by_reason", {}))
        for k in ("branches", "branches_declined", "families", "meta_actions", "causes"):
            getattr(out, k).update(d.get(k, {}))
        out.commands.update({int(c): n for c, n in d.get("commands", {}).items()})
        return out

    def to_attrs(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "dropped_episodes": self.dropped_episodes,
            "short_future": self.short_future,
            "run_out": self.run_out,
            "expert_failed": self.expert_failed,
            "branches": dict(self.branches),
            "branches_declined": dict(self.branches_declined),
            "families": dict(self.families),
            "meta_actions": dict(self.meta_actions),
            "causes": dict(self.causes),
            "commands": {str(k): v for k, v in sorted(self.commands.items())},
            "filter": {
                "kept": self.kept,
                "rejected": sum(self.rejected.values()),
                "rejected_by_reason": dict(self.rejected),
            },
        }


Recorded = tuple[list[dict[str, Any]], CollectStats]  # one episode's samples and its counts
