"""The demo: an agent (the privileged expert by default) drives every scenario of a bank in closed loop.

It writes one mp4 per scenario (cameras, BEV, status line and the agent's reasoning as a caption)
and prints one line per scenario with its Leaderboard-2.0 route score; ``scores.json`` collects
them. One failing scenario is reported and the demo goes on.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

import gymnasium as gym
from tqdm import tqdm

import envs  # noqa: F401  (registers the environments)
from agents import load_agent
from envs import compose_frame
from envs.sensors import VideoRecorder
from scenarios import load_bank


def drive(env: gym.Env, scenario_id: str, agent_spec: str = "expert", recorder: VideoRecorder | None = None,
          seed: int = 0) -> dict:  # fmt: skip
    """One closed-loop episode of an agent; returns the episode metrics."""
    base = env.unwrapped
    obs, _ = env.reset(seed=seed, options={"scenario": scenario_id})
    agent = load_agent(agent_spec)
    agent.reset({"scenario": base.scenario, "world": base.world})
    done = False
    while not done:
        out = agent.act(obs)
        obs, _, terminated, truncated, info = env.step(out.trajectory)
        done = terminated or truncated
        if recorder is not None:
            recorder.add(compose_frame(base.world, base.cameras, base.bev, base._frames, caption=out.reasoning))
    return info["metrics"]


def run_demo(bank: str, out: Path, video: bool = True, split: str | None = None, agent: str = "expert") -> int:
    out.mkdir(parents=True, exist_ok=True)
    b = load_bank(bank, split=split)
    env = gym.make(
        "LoopDrive-v0", bank=bank, split=split, decision_every=1, n_frames=1, render_mode="rgb_array" if video else None
    )
    print(f"LoopDrive demo: agent {agent!r} on bank {b.name} v{b.version} ({len(b)} scenarios) -> {out}")
    results = {}
    bar = tqdm(b.scenarios, desc="scenarios", unit="scn", leave=False, disable=None)  # no bar when not a tty
    for scn in bar:
        t0 = time.time()
        path = out / f"{scn.id}.mp4"
        try:
            with VideoRecorder(path) if video else _Null() as rec:
                m = drive(env, scn.id, agent, rec if video else None)
        except Exception as e:  # one failing scenario never stops the demo
            results[scn.id] = {"status": "error", "error": f"{type(e).__name__}: {e}"}
            tqdm.write(f"{scn.id:28s} ERROR {e}")
            traceback.print_exc()
            continue
        lb = m["leaderboard"]
        ev = ", ".join(f"{k} {v}" for k, v in sorted(m["events"].items()) if k != "route_complete") or "none"
        results[scn.id] = {
            "status": "ok",
            "family": scn.family,
            "score": lb["score"],
            "route_completion": lb["route_completion"],
            "infraction_penalty": lb["infraction_penalty"],
            "events": m["events"],
            "video": str(path) if video else None,
            "wall_s": round(time.time() - t0, 2),
        }
        tqdm.write(
            f"{scn.id:28s} score {lb['score']:5.1f}  RC {lb['route_completion']:5.1f}%  "
            f"IP {lb['infraction_penalty']:.2f}  infractions: {ev}" + (f"  -> {path}" if video else "")
        )
    ok = [r["score"] for r in results.values() if r["status"] == "ok"]
    mean = sum(ok) / len(ok) if ok else 0.0
    (out / "scores.json").write_text(
        json.dumps({"bank": b.name, "version": b.version, "mean_score": mean, "scenarios": results}, indent=1)
    )
    print(
        f"mean route score (Leaderboard 2.0 RC x IP) {mean:.1f} over {len(ok)}/{len(results)} scenarios; "
        f"scores in {out / 'scores.json'}"
    )
    return 0 if len(ok) == len(results) else 1


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None
