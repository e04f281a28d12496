"""Make the documentation's pictures from the real suite: ``python docs/figures.py`` (about a minute).

- ``images/cameras_and_bev.png``: one frame of the four Alpamayo cameras and the privileged BEV, the
  expert approaching a signalised intersection of the smoke bank (what a video frame shows), and
  ``images/cameras_traffic.png`` the same in stop-and-go traffic;
- ``images/report.png``: the top of an evaluation report (``loopdrive eval`` on four smoke scenarios),
  as headless Chromium renders it (skipped when no Chromium is installed).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

IMAGES = Path(__file__).parent / "images"


def cameras_and_bev(scenario: str, decisions: int, name: str) -> Path:
    import cv2

    from agents import load_agent
    from envs import LoopDriveEnv

    env = LoopDriveEnv(bank="smoke", scenario=scenario, render_mode="rgb_array")
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
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser:
        print(report(browser))
    else:
        print("no Chromium: images/report.png not remade")
