"""``loopdrive eval`` / ``regress`` / the report: journal, resume, faults, workers, browser check."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaluation import EvalConfig, EvalConfigError, Journal, evaluate, load_eval_config, read_episodes, summarize
from evaluation.regress import bootstrap_p, sign_test_p
from loopdrive.cli import main

ROOT = Path(__file__).resolve().parents[2]  # the repository: Ray workers import tests.evaluation.plugin_agents from it
FEW = ["curve-000", "cut_in-000", "lead_brake-000", "straight-000"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _same(a: dict, b: dict) -> None:
    """Summaries equal up to how the run was executed (workers, address)."""
    for s in (a, b):
        s["provenance"]["config"].pop("workers", None)
        s["provenance"]["config"].pop("ray_address", None)
        s.pop("interrupted", None)
    assert a == b


@pytest.fixture(scope="module")
def expert_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "expert"
    summary = evaluate(EvalConfig(bank="smoke", agent="expert", scenarios=FEW), out, progress=False)
    return out, summary


def test_eval_writes_journal_summary_and_report(expert_run):
    out, s = expert_run
    assert s["bank"] == {"name": "smoke", "version": "1.0.0", "split": None}
    assert s["agent"] == "expert"
    assert s["episodes"] == {"total": 4, "expected": 4, "ok": 4, "agent_error": 0, "timeout": 0, "infra_error": 0}
    for suite in ("leaderboard", "pdms", "alpasim"):
        st = s["suites"][suite]
        assert 0 <= st["ci95"][0] <= st["mean"] <= st["ci95"][1] <= 100
    assert s["suites"]["leaderboard"]["mean"] > 90 and s["success_rate"] == 100.0
    assert set(s["by_family"]) == {"curve", "cut_in", "lead_brake", "straight"}
    assert s["by_family"]["curve"]["leaderboard"] > 90
    assert s["consistency"]["mean"] > 0.5  # the expert's reasoning agrees with what it does
    assert s["endings"] == {"route_complete": 4} and s["by_family"]["curve"]["endings"] == {"route_complete": 1}
    assert s["provenance"]["git"] is None or len(s["provenance"]["git"]) >= 40
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 4
    rec = json.loads(lines[0])
    for key in (
        "scenario",
        "seed",
        "family",
        "tags",
        "status",
        "suites",
        "infractions",
        "reward_returns",
        "reasoning",
        "wall_s",
        "trace",
        "timing",
        "ending",
    ):
        assert key in rec, key
    assert rec["reasoning"] and rec["reasoning"][0]["text"]
    assert json.loads((out / "summary.json").read_text())["episodes"]["ok"] == 4
    assert (out / "report.html").stat().st_size > 10_000


def test_resume_after_kill_9_gives_the_same_summary(expert_run, tmp_path):
    reference, _ = expert_run
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "loopdrive.cli", *"eval --bank smoke --agent expert --out".split(), str(out)]
    cmd += ["--scenarios", ",".join(FEW)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    journal = out / "episodes.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if journal.exists() and journal.read_text().count("\n") >= 2:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    done = journal.read_text().count("\n")
    assert 2 <= done < 4
    with open(journal, "a") as f:
        f.write('{"key": "torn-wri')  # a kill in the middle of a write
    assert main(cmd[3:]) == 0
    assert journal.read_text().count("\n") == 4
    _same(json.loads((out / "summary.json").read_text()), json.loads((reference / "summary.json").read_text()))


def test_failing_agents_are_recorded_and_the_run_goes_on(tmp_path):
    cfg = EvalConfig(
        bank="smoke", agent="tests.evaluation.plugin_agents:Crashes", scenarios=["curve-000", "straight-000"]
    )
    s = evaluate(cfg, tmp_path / "crash", progress=False)
    assert s["episodes"]["agent_error"] == 1 and s["episodes"]["ok"] == 1
    rec = next(r for r in Journal(tmp_path / "crash" / "episodes.jsonl").records.values() if r["status"] != "ok")
    assert rec["scenario"] == "curve-000" and "planner exploded on purpose" in rec["error"]
    assert rec["suites"]["leaderboard"]["route_completion"] < 100  # scored up to the crash

    s = evaluate(
        cfg.model_copy(update={"agent": "tests.evaluation.plugin_agents:ReturnsNaN"}), tmp_path / "nan", progress=False
    )
    assert s["episodes"]["agent_error"] == 1 and s["episodes"]["ok"] == 1
    assert "non-finite" in s["failures"][0]["error"] and s["failures"][0]["key"].startswith("straight-000")


def test_a_hanging_agent_times_out(tmp_path):
    cfg = EvalConfig(
        bank="smoke", agent="tests.evaluation.plugin_agents:Hangs", scenarios=["curve-000"], episode_timeout_s=1.0
    )
    t0 = time.time()
    s = evaluate(cfg, tmp_path, progress=False)
    assert time.time() - t0 < 20
    assert s["episodes"]["timeout"] == 1 and "exceeded 1 s" in s["failures"][0]["error"]


def test_rig_ablation_and_seeds(tmp_path):
    cfg = EvalConfig(
        bank="smoke",
        agent="tests.evaluation.plugin_agents:NoisyExpert",
        scenarios=["curve-000", "s_bend-000"],
        rigs=["alpamayo4", "front_only"],
        seeds=2,
    )
    s = evaluate(cfg, tmp_path, progress=False)
    assert s["episodes"]["total"] == 8
    assert set(s["rig_ablation"]) == {"alpamayo4", "front_only"}
    for g in s["rig_ablation"].values():
        assert g["n"] == 4 and g["route_completion"] > 50 and g["lateral_error_m"] > 0
    page = (tmp_path / "report.html").read_text()
    assert 'id="rig-ablation"' in page and "front_only" in page
    lateral = {r["key"]: r["lateral_error_m"] for r in Journal(tmp_path / "episodes.jsonl").records.values()}
    assert lateral["curve-000|0|alpamayo4"] != lateral["curve-000|1|alpamayo4"]  # seeds differ
    assert lateral["curve-000|0|alpamayo4"] == lateral["curve-000|0|front_only"]  # the agent ignores cameras


@pytest.mark.slow
@pytest.mark.ray
def test_ray_workers_give_the_same_results_and_survive_a_dying_worker(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        base = EvalConfig(bank="smoke", agent="tests.evaluation.plugin_agents:NoisyExpert", scenarios=FEW[:3])
        s0 = evaluate(base, tmp_path / "w0", progress=False)
        s2 = evaluate(base.model_copy(update={"workers": 2}), tmp_path / "w2", progress=False)
        _same(s0, s2)
        # the VLA too: the same numbers in-process and on 2 workers (one torch-thread policy, task seeds)
        from agents.vla import VLA, VLAConfig

        VLA(VLAConfig(size="tiny")).save_pretrained(tmp_path / "vla")
        vla = EvalConfig(bank="smoke", agent=f"vla:{tmp_path / 'vla'}?reasoning=0", scenarios=FEW[:2])
        runs = [evaluate(vla.model_copy(update={"workers": w}), tmp_path / f"vla{w}", progress=False) for w in (0, 2)]
        traces = [
            [r["trace"] for r in sorted(read_episodes(tmp_path / f"vla{w}"), key=lambda r: r["key"])] for w in (0, 2)
        ]
        assert traces[0] == traces[1]
        _same(runs[0], runs[1])
        cfg = EvalConfig(
            bank="smoke", agent="tests.evaluation.plugin_agents:KillsItsWorker", scenarios=FEW[:2], workers=2
        )
        s = evaluate(cfg, tmp_path / "dies", progress=False)
    finally:
        ray.shutdown()
    assert s["episodes"]["ok"] == 1 and s["episodes"]["infra_error"] == 1
    lost = next(r for r in Journal(tmp_path / "dies" / "episodes.jsonl").records.values() if r["status"] != "ok")
    assert lost["scenario"] == "cut_in-000" and lost["attempts"] == 2 and "worker died" in lost["error"]


def test_regress_exit_codes(expert_run, tmp_path, capsys):
    base, _ = expert_run
    same = tmp_path / "same"
    evaluate(EvalConfig(bank="smoke", agent="expert", scenarios=FEW), same, progress=False)
    assert main(["regress", "--baseline", str(base), "--candidate", str(same), "--must-pass", "all"]) == 0
    assert "no significant regression" in capsys.readouterr().out

    worse = tmp_path / "worse"
    evaluate(EvalConfig(bank="smoke", agent="stop", scenarios=FEW), worse, progress=False)
    assert (
        main(["regress", "--baseline", str(base), "--candidate", str(worse), "--test", "sign", "--alpha", "0.1"]) == 1
    )
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "curve-000" in out
    assert (worse / "regress" / "regress.html").exists() and (worse / "regress" / "regress.md").exists()
    # what the candidate's episodes ended in: the expert drives every route, the stop agent stands to the time limit
    assert json.loads((worse / "summary.json").read_text())["endings"] == {"stalled": 4}
    assert json.loads((worse / "regress" / "regress.json").read_text())["endings"] == {
        "route_complete": {"baseline": 4, "candidate": 0},
        "stalled": {"baseline": 0, "candidate": 4},
    }
    assert "| route_complete -> stalled |" in out and "| stalled | 0 | 4 |" in out
    assert (
        'id="endings"' in (worse / "report.html").read_text()
        and "stalled" in (worse / "regress/regress.html").read_text()
    )

    # a model trained on another rig, evaluated on its own: one rig each, paired by scenario and seed
    other_rig = tmp_path / "other_rig"
    shutil.copytree(worse, other_rig)
    lines = [json.loads(x) for x in (other_rig / "episodes.jsonl").read_text().splitlines()]
    for x in lines:
        x["rig"], x["key"] = "front_only", f"{x['scenario']}|{x['seed']}|front_only"
    (other_rig / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main(["regress", "--baseline", str(base), "--candidate", str(other_rig)]) == 1
    out = capsys.readouterr().out
    assert "rigs: baseline alpamayo4, candidate front_only: paired by scenario and seed" in out
    assert "4 paired episodes" in out and "| curve-000|0 |" in out
    assert main(["regress", "--baseline", str(base), "--candidate", str(worse)]) == 1  # one rig: by the full key
    assert "rigs:" not in capsys.readouterr().out

    # one must-pass scenario that stops succeeding fails the check even when the mean barely moves
    one_off = tmp_path / "one_off"
    shutil.copytree(same, one_off)
    lines = [json.loads(x) for x in (one_off / "episodes.jsonl").read_text().splitlines()]
    lines[0]["suites"]["success"]["score"] = 0.0
    (one_off / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main(["regress", "--baseline", str(base), "--candidate", str(one_off), "--must-pass", "curve"]) == 1
    assert "Newly failing must-pass scenarios: 1" in capsys.readouterr().out
    assert main(["regress", "--baseline", str(base), "--candidate", str(one_off), "--must-pass", "highway"]) == 0

    assert main(["regress", "--baseline", str(base), "--candidate", str(tmp_path / "missing")]) == 2
    assert "no summary.json" in capsys.readouterr().err
    other = tmp_path / "other_bank"
    shutil.copytree(same, other)
    s = json.loads((other / "summary.json").read_text())
    s["bank"]["version"] = "9.9.9"
    (other / "summary.json").write_text(json.dumps(s))
    assert main(["regress", "--baseline", str(base), "--candidate", str(other)]) == 2
    assert "different banks" in capsys.readouterr().err


def _rescored(src: Path, dst: Path, change: dict[str, float], drop: tuple[str, ...] = ()) -> Path:
    """A copy of run ``src`` with each listed scenario's Driving Score moved by its points, ``drop`` unscored."""
    shutil.copytree(src, dst)
    lines = [json.loads(x) for x in (dst / "episodes.jsonl").read_text().splitlines()]
    for x in lines:
        x["suites"]["leaderboard"]["score"] += change.get(x["scenario"], 0.0)
    (dst / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines if x["scenario"] not in drop))
    return dst


def test_regress_pools_training_draws_paired_in_order(expert_run, tmp_path, capsys):
    base, _ = expert_run
    base_2 = _rescored(base, tmp_path / "base_2", {"straight-000": -30.0})
    cand_1 = _rescored(base, tmp_path / "cand_1", {"curve-000": -20.0})
    cand_2 = _rescored(base, tmp_path / "cand_2", {"curve-000": -40.0, "lead_brake-000": -26.0, "straight-000": -30.0})
    args = ["regress", "--baseline", str(base), str(base_2), "--candidate", str(cand_1), str(cand_2)]
    assert main(args) == 0  # one family down, the mean inside the noise over 4 episodes
    out = capsys.readouterr().out
    # draw 2 is paired with its own baseline (straight-000 -30 in both: no change); per episode, over the draws:
    # curve -30, lead_brake -13, cut_in 0, straight 0
    assert "episodes paired in every draw" in out and "diff -10.75" in out
    assert "families losing 5 points or more (pooled): curve -30.0, lead_brake -13.0" in out
    record = json.loads((cand_1 / "regress_draws" / "regress.json").read_text())
    assert record["n_pooled"] == 4 and record["mean_diff"] == pytest.approx(-10.75)
    assert [d["mean_diff"] for d in record["draws"]] == pytest.approx([-5.0, -16.5])
    assert record["families_lost"] == ["curve", "lead_brake"] and not record["failed"]
    page = (cand_1 / "regress_draws" / "regress.html").read_text()
    assert 'id="families"' in page and 'href="draw_2/regress.html"' in page
    assert (cand_1 / "regress_draws" / "draw_2" / "regress.md").exists()

    # every draw worse everywhere: a regression; an episode missing from one draw is left out of the pool
    worse = {name: -15.0 for name in FEW}
    cand_3 = _rescored(base, tmp_path / "cand_3", worse, drop=("cut_in-000",))
    cand_4 = _rescored(base_2, tmp_path / "cand_4", worse)
    args = ["regress", "--baseline", str(base), str(base_2), "--candidate", str(cand_3), str(cand_4)]
    assert main([*args, "--out", str(tmp_path / "worse")]) == 1
    record = json.loads((tmp_path / "worse" / "regress.json").read_text())
    assert record["n_pooled"] == 3 and record["mean_diff"] == pytest.approx(-15.0) and record["failed"]

    assert main(["regress", "--baseline", str(base), str(base_2), "--candidate", str(cand_1)]) == 2
    assert "2 baseline runs and 1 candidate runs" in capsys.readouterr().err


def test_paired_tests():
    import numpy as np

    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(5, 0) == pytest.approx(1 / 32)
    assert sign_test_p(0, 5) == 1.0
    p, ci = bootstrap_p(np.array([-10.0, -12.0, -9.0, -11.0, -10.5, -9.5]))
    assert p < 0.01 and ci[1] < 0
    p, _ = bootstrap_p(np.array([3.0, -2.0, 1.0, -1.0, 0.5, -0.5]))
    assert p > 0.2


def test_an_rl_recipes_rewards_are_recorded_with_how_their_return_follows_the_driving_score(tmp_path):
    import numpy as np

    weights = {"progress": 0.05, "collision": -20.0, "ttc": -0.5, "min_speed": -0.5}
    cfg = EvalConfig(bank="smoke", agent="constant_velocity", scenarios=FEW, rewards=weights)
    s = evaluate(cfg, tmp_path, progress=False)
    records = list(Journal(tmp_path / "episodes.jsonl").records.values())
    assert all(set(r["reward_returns"]) == set(weights) for r in records)
    returns = [sum(w * r["reward_returns"][k] for k, w in weights.items()) for r in records]
    scores = [r["suites"]["leaderboard"]["score"] for r in records]
    assert s["reward_vs_score"]["weights"] == weights and s["reward_vs_score"]["n"] == 4
    assert s["reward_vs_score"]["pearson"] == pytest.approx(np.corrcoef(returns, scores)[0, 1])
    with pytest.raises(ValueError, match=r"(?s)rewards.*unknown reward term .no_such_term."):
        EvalConfig(rewards={"no_such_term": 1.0})


def test_reward_vs_score_ranks_episodes():
    from evaluation.summary import reward_vs_score

    def episode(progress: float, collisions: float, score: float) -> dict:
        return {
            "reward_returns": {"progress": progress, "collision": collisions},
            "suites": {"leaderboard": {"score": score}},
        }

    weights = {"progress": 0.1, "collision": -10.0}
    ranked = [episode(100, 0, 90), episode(80, 0, 70), episode(120, 1, 40), episode(10, 1, 5)]  # 10, 8, 2, -9
    out = reward_vs_score(ranked, weights)
    assert out["spearman"] == pytest.approx(1.0) and 0.8 < out["pearson"] < 1.0
    flipped = [episode(100, 0, 5), episode(80, 0, 40), episode(120, 1, 70), episode(10, 1, 90)]
    assert reward_vs_score(flipped, weights)["spearman"] == pytest.approx(-1.0)
    assert reward_vs_score(ranked[:2], weights) is None  # too few episodes for a correlation


def test_summary_is_independent_of_record_order(expert_run):
    out, s = expert_run
    records = list(Journal(out / "episodes.jsonl").records.values())
    meta = {
        "bank": s["bank"],
        "agent": s["agent"],
        "expected": 4,
        "git": s["provenance"]["git"],
        "config": s["provenance"]["config"],
    }
    assert summarize(records, meta) == summarize(records[::-1], meta)


def test_bad_inputs_give_clear_errors(tmp_path, capsys):
    assert main(["eval", "--bank", "nope", "--agent", "expert", "--out", str(tmp_path / "a")]) == 2
    assert "no scenario bank 'nope'" in capsys.readouterr().err
    assert main(["eval", "--bank", "smoke", "--agent", "not_an_agent", "--out", str(tmp_path / "b")]) == 2
    assert "unknown agent 'not_an_agent'" in capsys.readouterr().err
    assert main(["eval", "--agent", "expert", "--rig", "fisheye9", "--out", str(tmp_path / "c")]) == 2
    assert "unknown rig(s) ['fisheye9']" in capsys.readouterr().err
    assert main(["eval", "--agent", "expert", "--scenarios", "curve-999", "--out", str(tmp_path / "d")]) == 2
    assert "curve-999" in capsys.readouterr().err
    bad = tmp_path / "eval.toml"
    bad.write_text('[eval]\nbank = "smoke"\nseeds = 0\ncolour = "red"\n')
    with pytest.raises(EvalConfigError, match=r"eval.toml: seeds: .*colour: Extra inputs"):
        load_eval_config(bad)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_run_folder_refuses_a_different_setup(expert_run, capsys):
    out, _ = expert_run
    assert main(["eval", "--bank", "smoke", "--agent", "stop", "--out", str(out), "--scenarios", ",".join(FEW)]) == 2
    assert "different set-up (agent: 'expert' -> 'stop')" in capsys.readouterr().err


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (make test installs Debian's chromium)")
def test_report_renders_in_headless_chromium(expert_run, tmp_path):
    out, _ = expert_run
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        (out / "report.html").resolve().as_uri(),
    ]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    assert 'data-ready="1"' in dom, "the page's script did not finish"
    assert "data-error" not in dom
    body = dom[dom.index('id="episodes"') :]
    assert body.count("<tr>") == 1 + 4  # header + one row per episode, built by the script
    assert dom.count('data-figure="bev"') == 4 and dom.count("<svg") >= 6
    assert "curve-000" in body and "status-ok" in body and body.count("<td>route_complete</td>") == 4


def test_a_time_out_holds_whatever_the_agent_catches(tmp_path):
    cfg = EvalConfig(
        bank="smoke",
        agent="tests.evaluation.plugin_agents:SwallowsTimeouts",
        scenarios=["curve-000"],
        episode_timeout_s=1.0,
    )
    t0 = time.time()
    s = evaluate(cfg, tmp_path, progress=False)
    assert s["episodes"]["timeout"] == 1 and time.time() - t0 < 20
    assert s["suites"]["leaderboard"]["n"] == 1  # scored up to the time-out, as the agent's failure


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ("ReturnsList", "floating-point"),
        ("ReturnsObjects", "floating-point"),
        ("ReturnsString", "floating-point"),
        ("ReturnsInts", "dtype int64"),
        ("ReturnsHuge", "outside"),
        ("ReturnsNothing", "must return an AgentOutput"),
    ],
)
def test_malformed_agent_outputs_are_the_agents_errors(tmp_path, agent, message):
    cfg = EvalConfig(bank="smoke", agent=f"tests.evaluation.plugin_agents:{agent}", scenarios=["straight-000"])
    s = evaluate(cfg, tmp_path, progress=False)
    assert s["episodes"]["agent_error"] == 1 and s["episodes"]["infra_error"] == 0
    assert message in s["failures"][0]["error"]
    assert s["suites"]["leaderboard"]["n"] == 1  # scored up to the failure


def test_infra_errors_are_never_scored_and_a_rerun_retries_them(expert_run, tmp_path):
    reference, _ = expert_run
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    lines = (out / "episodes.jsonl").read_text().splitlines()
    broken = json.loads(lines[0]) | {"status": "infra_error", "error": "the node went away"}
    (out / "episodes.jsonl").write_text("\n".join([json.dumps(broken), *lines[1:]]) + "\n")
    assert summarize([broken], {"bank": {}, "agent": "expert"})["suites"] == {}  # suites present, not scored
    summary = evaluate(EvalConfig(bank="smoke", agent="expert", scenarios=FEW), out, progress=False)
    assert summary["episodes"]["ok"] == len(FEW) and summary["episodes"]["infra_error"] == 0  # rerun, not kept
    _same(summary, json.loads((reference / "summary.json").read_text()))


def test_a_timeout_that_lost_its_worker_scores_zero(expert_run, tmp_path, monkeypatch):
    """A worker killed past the episode's budget takes the metrics with it: the record has a scored
    status and no suites, reads back from the journal, and counts as zero on every suite."""
    from evaluation import runner
    from evaluation.distributed import _lost
    from evaluation.journal import Journal

    reference, _ = expert_run
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    lines = (out / "episodes.jsonl").read_text().splitlines()
    (out / "episodes.jsonl").write_text("\n".join(lines[1:]) + "\n")  # the first episode is to run again

    def worker_killed(todo, *args):
        yield from (_lost(task, 1, "episode exceeded 600 s; worker replaced", status="timeout") for task in todo)

    monkeypatch.setattr(runner, "_execute", worker_killed)
    summary = evaluate(EvalConfig(bank="smoke", agent="expert", scenarios=FEW), out, progress=False)
    kept = [json.loads(line) for line in lines[1:]]
    assert summary["episodes"]["timeout"] == 1 and summary["suites"]["leaderboard"]["n"] == len(FEW)
    expected = sum(r["suites"]["leaderboard"]["score"] for r in kept) / len(FEW)
    assert summary["suites"]["leaderboard"]["mean"] == pytest.approx(expected)
    assert len(Journal(out / "episodes.jsonl").records) == len(FEW)  # the journal reads it back
