"""``evaluate(config, out)``: an agent on a scenario bank, closed loop, into a run folder.

The run folder holds ``config.json`` (what was asked), ``episodes.jsonl`` (the journal),
``summary.json``, ``report.html`` and, with video on, ``videos/``. Tasks are
``scenario x seed x rig``; the journal decides what is left to do, so rerunning the same command
after a kill (or a Ctrl-C) completes only the missing episodes. Results do not depend on the
worker count: an episode depends only on its task, and the summary sorts by task.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from evaluation.config import EvalConfig, EvalConfigError
from evaluation.episode import EpisodeRunner, Task, torch_threads
from evaluation.journal import Journal
from evaluation.summary import git_revision, summarize
from scenarios.routes import played_summary


def plan_tasks(config: EvalConfig) -> tuple[Any, list[Task]]:
    """The bank and the run's tasks, after checking that the bank, scenarios and rigs exist."""
    from envs.sensors.rig import RIGS
    from scenarios import load_bank

    bank = load_bank(config.bank, split=config.split)
    ids = [s.id for s in bank.scenarios]
    if config.scenarios is not None:
        if not config.scenarios:
            raise EvalConfigError("scenarios: the list is empty (leave it out to run the whole bank)")
        unknown = sorted(set(config.scenarios) - set(ids))
        if unknown:
            raise EvalConfigError(f"scenarios: {unknown[:5]} not in bank {bank.name!r} (split {config.split})")
        ids = [i for i in ids if i in set(config.scenarios)]
    if not ids:
        raise EvalConfigError(f"bank {bank.name!r} has no scenarios in split {config.split!r}")
    bad_rigs = [r for r in config.rigs if r not in RIGS]
    if bad_rigs:
        raise EvalConfigError(f"rigs: unknown rig(s) {bad_rigs}; available: {sorted(RIGS)}")
    return bank, [Task(sid, seed, rig) for rig in config.rigs for sid in ids for seed in range(config.seeds)]


def evaluate(
    config: EvalConfig,
    out: str | Path,
    *,
    progress: bool | None = None,
    agent_factory: Callable[[], Any] | None = None,
    write_report: bool = True,
) -> dict[str, Any]:
    """Run (or finish) the evaluation in ``out``; returns the summary (``summary["interrupted"]`` is
    True after a Ctrl-C, with the journal and a partial summary written)."""
    out = Path(out)
    bank, tasks = plan_tasks(config)
    if agent_factory is None:
        from agents import load_agent

        load_agent(config.agent)  # a bad spec fails here, before any worker starts
    out.mkdir(parents=True, exist_ok=True)
    _check_same_run(out, config)
    journal = Journal(out / "episodes.jsonl")
    todo = [t for t in tasks if t.key not in journal or journal.records[t.key]["status"] == "infra_error"]
    meta = {
        "bank": {"name": bank.name, "version": bank.version, "split": config.split},
        "agent": config.agent,
        "expected": len(tasks),
        "git": git_revision(),
        "config": config.model_dump(mode="json"),
    }
    if bank.manifest.families == ["route"]:  # a route file: what could not run, what is not played
        meta["routes"] = played_summary(bank.scenarios) | {"refused": bank.refused}
    interrupted = False
    bar = tqdm(
        total=len(tasks),
        initial=len(tasks) - len(todo),
        unit="ep",
        desc=f"eval {config.agent}",
        disable=None if progress is None else not progress,
        dynamic_ncols=True,
    )
    scores: list[float] = [r["score"] for r in journal.records.values() if r.get("score") is not None]
    scenarios = {s.id: s for s in bank.scenarios}
    try:
        for rec in _execute(todo, config, out, agent_factory):
            scenario = scenarios[rec["scenario"]]  # (a record lost with its worker knows only the task)
            rec.setdefault("family", scenario.family)
            rec.setdefault("tags", list(scenario.tags))
            journal.append(rec)
            if rec.get("score") is not None:
                scores.append(rec["score"])
            failed = sum(1 for r in journal.records.values() if r["status"] != "ok")
            bar.set_postfix(score=f"{sum(scores) / max(len(scores), 1):.1f}", failed=failed, refresh=False)
            bar.update(1)
            if rec["status"] != "ok":
                tqdm.write(f"{rec['key']}: {rec['status']}: {rec.get('error')}")
    except KeyboardInterrupt:
        interrupted = True
        tqdm.write(f"interrupted: {len(journal)}/{len(tasks)} episodes in {out / 'episodes.jsonl'}; rerun to finish")
    finally:
        bar.close()
    wanted = {t.key for t in tasks}
    records = [r for k, r in journal.records.items() if k in wanted]
    summary = summarize(records, meta)
    _write_json(out / "summary.json", summary)
    if write_report:
        from evaluation.report import write_report as _report

        _report(out, summary, records)
    return summary | {"interrupted": interrupted}


def _execute(
    todo: list[Task], config: EvalConfig, out: Path, agent_factory: Callable[[], Any] | None
) -> Iterator[dict[str, Any]]:
    if not todo:
        return
    if config.workers > 0:
        from evaluation.distributed import run_on_ray

        yield from run_on_ray(todo, config, out, agent_factory)
        return
    runner = EpisodeRunner(config, out, agent_factory)
    for task in todo:
        for attempt in range(config.retries + 1):
            with torch_threads(config.agent_threads):
                rec = runner.run(task)
            if rec["status"] != "infra_error" or attempt == config.retries:
                break
            stale = runner.envs.pop(task.rig, None)  # rebuild the environment before the retry
            if stale is not None:
                stale.close()
        rec["attempts"] = attempt + 1
        yield rec


def _check_same_run(out: Path, config: EvalConfig) -> None:
    path = out / "config.json"
    if path.exists():
        try:
            before = json.loads(path.read_text())
        except json.JSONDecodeError:
            before = None
        if isinstance(before, dict):
            old = EvalConfig.model_validate(before).identity() if _valid(before) else before
            new = config.identity()
            diff = {k: (old.get(k), v) for k, v in new.items() if old.get(k) != v}
            if diff:
                what = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
                raise EvalConfigError(f"{out} holds a run with a different set-up ({what}); use another --out")
    _write_json(path, config.model_dump(mode="json"))


def _valid(data: dict[str, Any]) -> bool:
    try:
        EvalConfig.model_validate(data)
        return True
    except ValueError:
        return False


def _write_json(path: Path, data: Any) -> None:
    """Atomic: a kill leaves the old file or the new one, never half of one."""
    from evaluation.episode import json_safe

    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(json_safe(data), indent=1, allow_nan=False))
    os.replace(tmp, path)
