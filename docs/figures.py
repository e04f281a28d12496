"""Make the documentation's pictures from the real suite: ``python docs/figures.py`` (about a minute).

- ``images/cameras_and_bev.png``: one frame of the four Alpamayo cameras and the privileged BEV, the
  expert approaching a signalised intersection of the smoke bank (what a video frame shows), and
  ``images/cameras_traffic.png`` the same in stop-and-go traffic;
- ``images/town10hd.png``: Town10HD as imported (lanes by type, lights, stop lines) with a ``towns`` route,
  and ``images/town10hd_cameras.png`` a camera + BEV frame of the expert on that route;
- ``images/rig_views.png``: what the tiny VLA sees of a bend under each camera rig of the camera-rig
  experiment, at its input size (56x112), beside the same frames at the rendered size;
- ``images/signal_views.png``: the light ahead of a ``core_large`` junction in the front-wide and tele
  cameras, rendered and at the tiny VLA's input size (the RL experiments page: what its plan cannot see);
- ``images/brake_light_views.png``: the car ahead in a ``lead_brake`` scenario before and while it brakes,
  the same way (its tail lamps light up);
- ``images/rl_critic.png``: PPO's critic and returns over iterations without and with its own fitting
  epochs and warm-up (the RL experiments page), from two runs' ``metrics.jsonl`` (skipped where
  those runs are not on this machine);
- ``images/blind_plan.png``: the SFT recipe's best draw driving into a slow car (``overtake``), its front
  and tele cameras at its input size each second, with its plan from them and from the first
  decision's cameras (skipped where that checkpoint is not on this machine);
- ``images/near_misreads.png``: for a cut-in, an overtake and a braking car ahead, the near sample (a policy's
  own state, from ``zm0``'s second DAgger round) whose gap the probe misreads most, its front-wide and tele
  cameras as the VLA gets them, with the gap and the probe's reading (skipped where that run is not on this
  machine);
- ``images/route_shift.png``: where the SFT recipe's car drives in three ``overtake`` and a ``parked_blocking``
  episode of ``core_large`` val with the head's lane change held alone and held with the route moved into
  that lane (``route_shift``), from two evaluations' traces (skipped where those runs are not on this
  machine);
- ``images/report.png``: the top of an evaluation report (``loopdrive eval`` on four smoke scenarios),
  as headless Chromium renders it (skipped when no Chromium is installed).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

IMAGES = Path(__file__).parent / "images"


def cameras_and_bev(scenario: str, decisions: int, name: str, bank: str = "smoke") -> Path:
    import cv2

    from agents import load_agent
    from envs import LoopDriveEnv

    env = LoopDriveEnv(bank=bank, scenario=scenario, render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    expert = load_agent("expert")
    expert.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    for _ in range(decisions):
        out = expert.act(obs)
        obs, *_ = env.step(out.trajectory)
    frame = env.video_frame(out.reasoning)
    path = IMAGES / name
    cv2.imwrite(str(path), cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    return path


def rendered_and_seen(cams, text: str):
    """One labelled row: the cameras ``[n, H, W, 3]`` as rendered, then as the tiny VLA gets them (56x112,
    the model's area filter, shown at the rendered size)."""
    import cv2
    import numpy as np

    small = [
        cv2.resize(cv2.resize(c, (112, 56), interpolation=cv2.INTER_AREA), c.shape[1::-1], cv2.INTER_NEAREST)
        for c in cams
    ]
    pad = np.full((cams.shape[1], 8, 3), 255, np.uint8)
    row = np.hstack([x for c in [*cams, pad, *small] for x in (c, pad)])
    label = np.full((22, row.shape[1], 3), 255, np.uint8)
    cv2.putText(label, text, (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1)
    return np.vstack([label, row])


def rig_views(scenario: str = "curve-000", decisions: int = 6, name: str = "rig_views.png") -> Path:
    """One moment of a bend through each rig's cameras, rendered (128x256) and as the model gets it."""
    import cv2
    import numpy as np

    from agents import load_agent
    from envs import LoopDriveEnv

    rows = []
    for rig in ("alpamayo4", "front_only", "front_tele"):
        env = LoopDriveEnv(bank="smoke", scenario=scenario, rig=rig, n_frames=1, observations=("cameras",))
        obs, _ = env.reset(seed=0)
        expert = load_agent("expert")
        expert.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
        for _ in range(decisions):
            obs, *_ = env.step(expert.act(obs).trajectory)
        cams = obs["cameras"][:, -1]  # [n_cams, H, W, 3]
        rows.append(rendered_and_seen(cams, f"{rig}: rendered 128x256 | as the model sees it, 56x112"))
    width = max(r.shape[1] for r in rows)
    page = np.vstack([np.pad(r, ((0, 8), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows])
    path = IMAGES / name
    cv2.imwrite(str(path), cv2.cvtColor(page, cv2.COLOR_RGB2BGR))
    return path


def front_views(scenario: str) -> Iterator[tuple[Any, np.ndarray]]:
    """The expert driving a ``core_large`` val scenario: at each decision its world and the front-wide and
    tele cameras ``[2, H, W, 3]``, until the episode ends."""
    from agents import load_agent
    from envs import LoopDriveEnv

    env = LoopDriveEnv(bank="core_large", split="val", scenario=scenario, n_frames=1, observations=("cameras",))
    obs, _ = env.reset(seed=0)
    expert = load_agent("expert")
    expert.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    names = [c.name for c in env.rig]
    wanted = [names.index("front_wide_120fov"), names.index("front_tele_30fov")]
    while True:
        yield env.world, obs["cameras"][wanted, -1]
        obs, _, terminated, truncated, _ = env.step(expert.act(obs).trajectory)
        if terminated or truncated:
            return


def save_rows(rows: list[np.ndarray], name: str) -> Path:
    """Labelled rows (``rendered_and_seen``) one under the other, as ``images/name``."""
    import cv2
    import numpy as np

    page = np.vstack([np.pad(r, ((0, 8), (0, 0), (0, 0)), constant_values=255) for r in rows])
    path = IMAGES / name
    cv2.imwrite(str(path), cv2.cvtColor(page, cv2.COLOR_RGB2BGR))
    return path


def signal_views(
    scenario: str = "signalized_intersection-052",
    distances: tuple[float, ...] = (45.0, 25.0),
    name: str = "signal_views.png",
) -> Path:
    """The light ahead as the expert approaches a junction (``core_large`` val), in the front-wide and tele
    cameras, rendered (128x256) and as the tiny VLA gets them (56x112): a few pixels of colour."""
    from rewards.scene import scene_facts

    rows, todo = [], list(distances)
    for world, cams in front_views(scenario):
        signal = scene_facts(world).signal_ahead
        if signal is not None and signal["distance"] <= todo[0]:
            todo.pop(0)
            text = f"{signal['state']} light {signal['distance']:.0f} m ahead: rendered | as the model sees it, 56x112"
            rows.append(rendered_and_seen(cams, text))
            if not todo:
                break
    return save_rows(rows, name)


def brake_light_views(scenario: str = "lead_brake-040", name: str = "brake_light_views.png") -> Path:
    """The car ahead before and while it brakes (``core_large`` val), in the front-wide and tele cameras,
    rendered (128x256) and as the tiny VLA gets them (56x112): its tail lamps light up."""
    from rewards.scene import scene_facts

    rows, shown = [], set()
    for world, cams in front_views(scenario):
        braking = bool(world.brake_lights()[world.compiled.actors.index("lead")])
        if braking not in shown:
            shown.add(braking)
            gap = scene_facts(world).lead_vehicle["gap"]
            what = "braking" if braking else "cruising"
            text = f"the car ahead {what}, {gap:.0f} m: rendered | as the model sees it, 56x112"
            rows.append(rendered_and_seen(cams, text))
            if len(shown) == 2:
                break
    return save_rows(rows, name)


def town_map(town: str, scenario: str, name: str) -> Path:
    """An imported CARLA town: lanes by type, traffic lights, stop lines, and a ``towns`` route on it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from scenarios import load_bank
    from scenarios.opendrive.cache import load_map

    road_map = load_map(Path(__file__).parents[1] / "scenarios" / "towns" / f"{town}.xodr.gz")[0]
    colours = {"driving": "#555555", "shoulder": "#b0a080", "sidewalk": "#9ec5e8", "parking": "#c9a0dc"}
    fig, ax = plt.subplots(figsize=(8, 8), dpi=110)
    for lane in road_map.lanes.values():
        ax.fill(*lane.polygon.exterior.xy, color=colours.get(lane.kind, "#dddddd"), lw=0)
    for sl in road_map.stop_lines:
        ax.plot(*road_map.stop_line_geometry(sl).xy, color="#d62728" if sl.signal else "#ff7f0e", lw=1.5)
    xy = [s.position for s in road_map.signals.values()]
    ax.scatter([p[0] for p in xy], [p[1] for p in xy], s=14, color="#d62728", zorder=3, label="traffic lights")
    route = load_bank("towns").get(scenario).ego.route
    line = road_map.lane_sequence_polyline(route)
    ax.plot(line[:, 0], line[:, 1], color="#2ca02c", lw=3, label=f"route of {scenario}")
    for kind, colour in colours.items():
        ax.fill([], [], color=colour, label=f"{kind} lanes")
    ax.set_aspect("equal")
    ax.set_title(f"{town} imported from OpenDRIVE (CARLA's frame)")
    ax.legend(loc="lower left", fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
    path = IMAGES / name
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def rl_critic(runs: dict[str, Path], name: str = "rl_critic.png") -> Path | None:
    """The critic's value loss and explained variance, and the training episodes' return, per iteration."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not all((run / "metrics.jsonl").exists() for run in runs.values()):
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for color, (label, run) in enumerate(runs.items()):
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        rows = [r for r in rows if "learner/vf_loss" in r]
        steps, style = [r["step"] for r in rows], {"label": label, "color": f"C{color}"}
        axes[0].plot(steps, [r["learner/vf_loss"] for r in rows], **style)
        if "learner/vf_explained_var" in rows[0]:  # logged since the fitting epochs came
            axes[1].plot(steps, [r["learner/vf_explained_var"] for r in rows], **style)
        axes[2].plot(steps, [r["reward/return"] for r in rows], **style)
    titles = ("critic's value loss", "explained variance (before the iteration moves it)", "training episodes' return")
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=len(runs), fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path = IMAGES / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def blind_plan(checkpoint: Path, scenario: str = "overtake-041", name: str = "blind_plan.png") -> Path | None:
    """What the tiny VLA sees as it drives into a slow car (its front and tele cameras, as it gets them),
    with how far its plan goes in 2 s from those cameras and from the first decision's cameras."""
    import cv2
    import numpy as np

    from agents import load_agent
    from envs import LoopDriveEnv

    if not (checkpoint / "vla_config.json").exists():
        return None
    agent = load_agent(f"vla:{checkpoint}?reasoning=0&noise=0")
    env = LoopDriveEnv(bank="core_large", split="val", scenario=scenario, n_frames=1, camera_size=(56, 112))
    obs, _ = env.reset(seed=0)
    agent.reset({"scenario": env.scenario, "world": env.world, "seed": 0})
    first, tiles, done = obs["cameras"], [], False
    while not done:
        plan = agent.act(obs).trajectory
        if round(env.world.t * 2) % 2 == 0:  # every second decision: each second
            stale = agent.act(obs | {"cameras": first}).trajectory
            state, lead = env.world.state, env.world.compiled.actors.ids.index("lead")
            gap = float(np.hypot(state.x[lead] - state.x[0], state.y[lead] - state.y[0]))  # (centre to centre)
            tile = np.hstack(
                [cv2.resize(c[-1], (224, 112), interpolation=cv2.INTER_NEAREST) for c in obs["cameras"][[1, 3]]]
            )
            label = np.full((40, tile.shape[1], 3), 255, np.uint8)
            for row, text in enumerate(
                (
                    f"t = {env.world.t:.0f} s, car ahead {gap:.0f} m: plan {plan[19, 0]:.1f} m in 2 s",
                    f"(with the cameras of t = 0: {stale[19, 0]:.1f} m)",
                )
            ):
                cv2.putText(label, text, (4, 15 + 18 * row), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1)
            tiles.append(np.vstack([label, tile]))
        obs, _, terminated, truncated, _ = env.step(plan)
        done = terminated or truncated
    pad = np.full((tiles[0].shape[0], 8, 3), 255, np.uint8)
    page = np.vstack(
        [
            np.hstack([tiles[i], pad, tiles[i + 1]])
            if i + 1 < len(tiles)
            else np.hstack([tiles[i], pad, np.full_like(tiles[i], 255)])
            for i in range(0, len(tiles), 2)
        ]
    )
    path = IMAGES / name
    cv2.imwrite(str(path), cv2.cvtColor(page, cv2.COLOR_RGB2BGR))
    return path


def near_misreads(
    run: Path, families: tuple[str, ...] = ("cut_in", "overtake", "lead_brake"), name: str = "near_misreads.png"
) -> Path | None:
    """Per family, the near sample of ``run``'s second DAgger round whose gap its final checkpoint's probe
    misreads most: the front-wide and tele cameras as the VLA gets them, the gap true and read."""
    import cv2
    import numpy as np

    from agents.vla.model import VLA
    from agents.vla.perception import LEAD_RANGE_M, PERCEPTION_TARGETS
    from benchmarks.probe_reading import dataset_with_perception, driven_samples, near_samples
    from envs.sensors import RIGS

    checkpoint, round_2 = run / "checkpoints" / "final", run / "dagger" / "round_2.zarr"
    if not (checkpoint / "vla_config.json").exists() or not round_2.exists():
        return None
    data = dataset_with_perception(str(round_2))
    driven = driven_samples(data)
    truth = np.asarray(data.arrays["perception"][: len(data)])[driven]
    speed = np.asarray(data.arrays["ego_state"][: len(data)])[driven, 0]
    near = np.flatnonzero(near_samples(truth, speed))
    read = VLA.from_pretrained(checkpoint).read_perception(data.batch(driven[near]).observations)
    gap = PERCEPTION_TARGETS.index("lead_gap")
    true_m, read_m = truth[near, gap] * LEAD_RANGE_M, read[:, gap] * LEAD_RANGE_M
    family = data.families()[driven[near]]
    names = [c.name for c in RIGS[data.card["rig"]]]
    cameras = [names.index("front_wide_120fov"), names.index("front_tele_30fov")]
    rows = []
    for wanted in families:
        worst = max(np.flatnonzero(family == wanted), key=lambda i: abs(read_m[i] - true_m[i]), default=None)
        if worst is None:
            continue
        frames = np.asarray(data.arrays["cameras"][driven[near[worst]]])[cameras, -1]
        tiles = [cv2.resize(f, (224, 112), interpolation=cv2.INTER_NEAREST) for f in frames]
        pad = np.full((112, 8, 3), 255, np.uint8)
        label = np.full((22, 2 * 224 + 8, 3), 255, np.uint8)
        text = f"{wanted}: car in the path {true_m[worst]:.0f} m ahead, the probe reads {read_m[worst]:.0f} m"
        cv2.putText(label, text, (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1)
        rows.append(np.vstack([label, np.hstack([tiles[0], pad, tiles[1]])]))
    return save_rows(rows, name)


def route_shift_paths(
    runs: dict[str, Path],
    scenarios: tuple[str, ...] = ("overtake-040", "overtake-047", "overtake-052", "parked_blocking-047"),
    name: str = "route_shift.png",
) -> Path | None:
    """Per scenario, the lanes of its road and the path each evaluation's car drove (collisions starred):
    lateral position against distance, stretched across so that a lane change shows."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evaluation.journal import read_episodes
    from evaluation.report import TRACE_DT, _map_lines
    from scenarios import load_bank

    if not all((run / "episodes.jsonl").exists() for run in runs.values()):
        return None
    bank = load_bank("core_large", split="val")
    by_id = {s.id: s for s in bank.scenarios}
    episodes = {label: {r["scenario"]: r for r in read_episodes(run)} for label, run in runs.items()}
    fig, axes = plt.subplots(len(scenarios), 1, figsize=(10, 2.0 * len(scenarios)), sharex=True)
    for ax, scenario in zip(axes, scenarios):
        lanes, _ = _map_lines(by_id[scenario], bank.path)
        for polygon in lanes:
            ax.fill(polygon[:, 0], polygon[:, 1], color="0.9", edgecolor="0.6", lw=0.6)
        for color, (label, records) in enumerate(episodes.items()):
            r = records[scenario]
            xy = np.asarray(r["trace"], float)
            ax.plot(xy[:, 0], xy[:, 1], color=f"C{color}", lw=1.8, label=label)
            for inf in r["infractions"]:
                if inf["type"].startswith("collision"):
                    i = min(int(round(inf["t"] / TRACE_DT)), len(xy) - 1)
                    ax.plot(*xy[i], "*", color=f"C{color}", ms=14, mec="k")
            ax.set_title(
                f"{scenario}: " + ", ".join(f"{lab} {rec[scenario]['score']:.0f}" for lab, rec in episodes.items()),
                fontsize=9,
            )
        ax.set_xlim(0, 260)
        ax.set_ylim(-8, 5)
        ax.set_ylabel("y (m)", fontsize=8)
    axes[-1].set_xlabel("x (m)")
    axes[0].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path = IMAGES / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(chromium: str) -> Path:
    from evaluation import EvalConfig, evaluate

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        scenarios = ["curve-000", "cut_in-000", "pedestrian_crossing-000", "signalized_intersection-000"]
        evaluate(EvalConfig(bank="smoke", agent="expert", scenarios=scenarios), run, progress=False)
        path = IMAGES / "report.png"
        flags = "--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --disable-background-networking"
        command = [chromium, *flags.split(), f"--user-data-dir={tmp}/profile", "--virtual-time-budget=5000"]
        command += ["--window-size=1200,900", f"--screenshot={path}", (run / "report.html").as_uri()]
        subprocess.run(command, check=True, capture_output=True, timeout=120)
    return path


if __name__ == "__main__":
    IMAGES.mkdir(exist_ok=True)
    print(cameras_and_bev("signalized_intersection-000", 5, "cameras_and_bev.png"))
    print(cameras_and_bev("traffic_jam-000", 8, "cameras_traffic.png"))
    print(rig_views())
    print(signal_views())
    print(brake_light_views())
    print(town_map("Town10HD", "Town10HD-000", "town10hd.png"))
    print(cameras_and_bev("Town10HD-000", 12, "town10hd_cameras.png", bank="towns"))
    rl_runs = {
        "PPO recipe, 32 iterations": Path("runs/rl/long32_s0"),
        "+ critic warm-up 4 and 50 fitting epochs, 36 iterations": Path("runs/rl/cw4fit50_long_s0"),
    }
    print(rl_critic(rl_runs) or "runs/rl/long32_s0 or cw4fit50_long_s0 missing: images/rl_critic.png not remade")
    recipe = Path("runs/s54/po_r2/checkpoints/final")  # the SFT recipe's best draw (docs/experiments/sft.md)
    print(blind_plan(recipe) or f"{recipe} missing: images/blind_plan.png not remade")
    zm0 = Path("runs/s80/zm0")  # the zoom rig's draw (docs/experiments/rl.md, stops 80 and 81)
    print(near_misreads(zm0) or f"{zm0} missing: images/near_misreads.png not remade")
    shift_runs = {  # the recipe's seed-0 draw of stop 88 on core_large val (docs/experiments/rl.md, stop 89)
        "hold=6": Path("runs/s89_recipe_val"),
        "hold=12&route_shift=3.5": Path("runs/s89c_shiftkeep_h12_val"),
    }
    print(route_shift_paths(shift_runs) or "the stop-89 val runs are missing: images/route_shift.png not remade")
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser:
        print(report(browser))
    else:
        print("no Chromium: images/report.png not remade")
