"""``loopdrive``: the command line.

Subcommands import their layer lazily so ``loopdrive bank validate`` starts fast.

  loopdrive bank list | show NAME | generate --name N --per-family K --seed S [--out DIR] | validate PATH
  loopdrive eval --bank NAME|PATH --agent SPEC --out DIR [--split S] [--seeds K] [--workers N]
                 [--ray-address ADDR] [--rig R[,R2]] [--video] [--config eval.toml]
  loopdrive regress --baseline DIR --candidate DIR [--must-pass TAGS] [--alpha 0.05]
  loopdrive regress --baseline DIR1 DIR2 DIR3 --candidate DIR1 DIR2 DIR3   (training draws, paired in order, pooled)
  loopdrive report DIR                 (rebuild report.html from a run's journal)
  loopdrive compare --out DIR LABEL=RUN [LABEL=RUN ...]   (runs side by side: curvature ratio per rig, scores)
  loopdrive collect --bank core --split train --agent expert --out data/x.zarr [--seeds K] [...]
  loopdrive train --config configs/sft_tiny.toml [--set a.b=v] [--run-dir DIR | --resume DIR]
  loopdrive demo [--bank smoke] [--out runs/demo] [--no-video]
  loopdrive serve-rewards [--host 127.0.0.1] [--port 8765] [--critic SPEC]   (token from LOOPDRIVE_REWARD_TOKEN)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _bank_list(args: argparse.Namespace) -> int:
    from scenarios import bank_names, load_bank

    for name in bank_names():
        b = load_bank(name)
        splits = ", ".join(f"{k} {v}" for k, v in b.manifest.splits.items())
        print(f"{name:12s} v{b.version:8s} {len(b):4d} scenarios ({splits})  {b.manifest.description}")
    return 0


def _bank_show(args: argparse.Namespace) -> int:
    from collections import Counter

    from scenarios import load_bank

    b = load_bank(args.bank, split=args.split)
    print(f"{b.name} v{b.version} at {b.path}: {len(b)} scenarios" + (f" in split {args.split}" if args.split else ""))
    fams = Counter(s.family for s in b)
    for fam, n in sorted(fams.items()):
        print(f"  {fam:25s} {n:4d}")
    if args.scenario:
        print(json.dumps(b.get(args.scenario).model_dump(mode="json", exclude_none=True), indent=1))
    return 0


def _bank_generate(args: argparse.Namespace) -> int:
    from scenarios import generate_bank
    from scenarios.banks import BANKS_DIR

    out = Path(args.out) if args.out else BANKS_DIR / args.name
    if args.maps:  # town scenarios on OpenDRIVE maps
        from scenarios import load_bank
        from scenarios.towns import generate_town_bank

        if args.per_map is None:
            raise ValueError("--maps needs --per-map N")
        generate_town_bank(args.maps, args.per_map, args.seed, out, args.name, args.version)
        b = load_bank(out)
        print(f"wrote {len(b)} scenarios to {out} ({', '.join(f'{k} {v}' for k, v in b.manifest.splits.items())})")
        return 0
    if args.per_family is None:
        raise ValueError("give --per-family N (procedural families) or --maps PATH... --per-map N (towns)")
    families = args.families.split(",") if args.families else None
    b = generate_bank(
        out,
        args.name,
        args.per_family,
        args.seed,
        version=args.version,
        families=families,
        split_fractions=args.split_fractions,
        description=args.description,
    )
    print(f"wrote {len(b)} scenarios to {out} ({', '.join(f'{k} {v}' for k, v in b.manifest.splits.items())})")
    return 0


def _bank_validate(args: argparse.Namespace) -> int:
    from scenarios import validate_path

    problems = validate_path(args.path)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s) in {args.path}", file=sys.stderr)
        return 1
    print(f"{args.path}: valid")
    return 0


def _map_info(args: argparse.Namespace) -> int:
    import json
    import time
    from dataclasses import asdict

    from scenarios.opendrive.cache import load_map

    t0 = time.perf_counter()
    road_map, report, cached = load_map(args.path, args.frame, use_cache=not args.no_cache, memo=False)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    load_map(args.path, args.frame, use_cache=not args.no_cache, memo=False)
    again = time.perf_counter() - t0
    lanes = list(road_map.lanes.values())
    info = asdict(report) | {
        "file": str(args.path),
        "frame": args.frame,
        "lanes": len(lanes),
        "driving_km": round(sum(lane.length for lane in lanes if lane.kind == "driving") / 1000, 3),
        "signals": len(road_map.signals),
        "stop_lines": len(road_map.stop_lines),
        "bounds": [round(v, 1) for v in road_map.bounds_of_lanes()],
        "height_range_m": [round(v, 2) for v in road_map.height_range()],
        "load_s": {"first": round(first, 3), "first_was_cached": cached, "second": round(again, 3)},
        "warnings": report.warnings[:50],
        "n_warnings": len(report.warnings),
    }
    print(json.dumps(info, indent=1))
    return 0


def _map_check(args: argparse.Namespace) -> int:
    import json

    from scenarios.opendrive.oracle import compare_with_carla

    print(json.dumps(compare_with_carla(args.path, args.every), indent=1))
    return 0


def _map_fetch(args: argparse.Namespace) -> int:
    import json

    from scenarios.opendrive.server import fetch_server_map

    path = fetch_server_map(args.host, args.port, args.town, args.out)
    print(json.dumps({"file": str(path), "bytes": path.stat().st_size}))
    return 0


def _serve_rewards(args: argparse.Namespace) -> int:
    from rewards.service import RewardServer, load_service_reward

    for spec in args.reward or []:
        load_service_reward(spec)
    server = RewardServer(
        args.host,
        args.port,
        workers=args.workers,
        max_bytes=args.max_bytes,
        critic=args.critic,
        request_timeout=args.request_timeout,
    )
    rewards = ", ".join(sorted(server.rewards))
    print(f"reward service on {server.url} (rewards: {rewards}; critic {args.critic}); Ctrl-C stops", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from loopdrive.demo import run_demo

    return run_demo(
        args.bank, Path(args.out), video=not args.no_video, split=args.split, agents=args.agents, sft=not args.no_sft
    )


def _eval(args: argparse.Namespace) -> int:
    from evaluation import EvalConfig, evaluate, load_eval_config

    given = {name: getattr(args, name) for name in EvalConfig.model_fields if getattr(args, name, None) is not None}
    config = load_eval_config(args.config, **given)
    out = Path(args.out)
    summary = evaluate(config, out)
    for route, why in summary.get("routes", {}).get("refused", {}).items():
        print(f"not run: {route}: {why}", file=sys.stderr)
    lb, ep = summary["suites"].get("leaderboard", {}), summary["episodes"]
    ci = lb.get("ci95") or [None, None]
    if lb.get("mean") is not None:
        print(
            f"driving score {lb['mean']:.1f} (95% CI {ci[0]:.1f}-{ci[1]:.1f}), success "
            f"{summary['success_rate']:.1f}% over {ep['total']}/{ep['expected']} episodes "
            f"({ep['agent_error']} agent errors, {ep['timeout']} timeouts, {ep['infra_error']} infra errors)"
        )
    paths = summary.get("route_paths")
    if paths:
        lo, hi = paths["ci95"]
        print(f"95% CI over the {paths['n']} distinct route paths (their runs resampled together): {lo:.1f}-{hi:.1f}")
    with_min_speed = summary.get("driving_score_min_speed") or {}
    if with_min_speed.get("mean") is not None:
        print(f"driving score with the min-speed infraction (Leaderboard 2.0): {with_min_speed['mean']:.1f}")
    print(f"summary: {out / 'summary.json'}\nreport:  {(out / 'report.html').resolve()}")
    return 130 if summary["interrupted"] else 0


def _regress(args: argparse.Namespace) -> int:
    from evaluation import draws, regress

    must_pass = args.must_pass.split(",") if args.must_pass else None
    options = {"metric": args.metric, "alpha": args.alpha, "test": args.test, "tolerance": args.tolerance}
    try:
        if len(args.baseline) == len(args.candidate) == 1:
            cmp = regress.compare(args.baseline[0], args.candidate[0], must_pass=must_pass, **options)
            out = regress.write_outputs(cmp, args.out or Path(args.candidate[0]) / "regress")
            print(regress.to_markdown(cmp))
        else:
            cmp = draws.compare_draws(args.baseline, args.candidate, must_pass=must_pass, **options)
            out = draws.write_outputs(cmp, args.out or Path(args.candidate[0]) / "regress_draws")
            print(draws.to_markdown(cmp))
    except regress.RegressInputError as e:
        print(f"loopdrive regress: error: {e}", file=sys.stderr)
        return 2
    print(f"reports: {out / 'regress.md'}, {out / 'regress.html'}")
    return 1 if cmp.failed else 0


def _report(args: argparse.Namespace) -> int:
    from evaluation import read_episodes
    from evaluation.report import write_report

    run = Path(args.run)
    summary_path = run / "summary.json"
    if not summary_path.exists():
        raise FileNotFoundError(f"{run}: no summary.json (is this a `loopdrive eval` run folder?)")
    print(write_report(run, json.loads(summary_path.read_text()), read_episodes(run)))
    return 0


def _compare(args: argparse.Namespace) -> int:
    from evaluation.compare import CompareInputError, write_comparison

    runs = []
    for item in args.runs:
        label, sep, folder = item.partition("=")
        if not sep or not label or not folder:
            print(f"loopdrive compare: error: {item!r}: expected LABEL=RUN_FOLDER", file=sys.stderr)
            return 2
        runs.append((label, Path(folder)))
    try:
        page = write_comparison(runs, args.out)
    except CompareInputError as e:
        print(f"loopdrive compare: error: {e}", file=sys.stderr)
        return 2
    print((page.parent / "compare.md").read_text())
    print(f"reports: {page}, {page.parent / 'compare.md'}, {page.parent / 'compare.json'}")
    return 0


def _collect(args: argparse.Namespace) -> int:
    from loopdrive.flags import model_from_flags
    from training.data import CollectSettings, card_path, collect

    card = collect(model_from_flags(args, CollectSettings), args.out)
    f = card["labels"].get("filter", {})
    print(
        f"{card['samples']} samples from {card['episodes_complete']} episodes in {args.out} "
        f"(filter kept {f.get('kept', 0)}, rejected {f.get('rejected', 0)}; {card['labels'].get('run_out', 0)} "
        f"futures driven on past an episode's end); card: {card_path(args.out)}"
    )
    return 0


def _train(args: argparse.Namespace) -> int:
    from training.run import main as run_main

    argv = (["--config", args.config] if args.config else []) + [x for s in args.set for x in ("--set", s)]
    argv += (["--run-dir", args.run_dir] if args.run_dir else []) + (["--resume", args.resume] if args.resume else [])
    return run_main(argv)


def _comma_list(text: str) -> list[str]:
    return [part for part in text.split(",") if part]


def _fractions(text: str) -> tuple[float, float, float]:
    """``0.5,0.25,0.25`` -> the train / val / test shares (argparse reports a ValueError as bad input)."""
    parts = tuple(float(x) for x in text.split(","))
    if len(parts) != 3 or min(parts) < 0 or abs(sum(parts) - 1) > 1e-6:
        raise ValueError(f"split fractions {text!r}: three shares >= 0 that add up to 1")
    return parts


def build_parser() -> argparse.ArgumentParser:
    from loopdrive.flags import add_model_flags
    from training.data.settings import CollectSettings

    p = argparse.ArgumentParser(prog="loopdrive", description="Closed-loop driving suite for VLA agents.")
    sub = p.add_subparsers(dest="command", required=True)

    bank = sub.add_parser("bank", help="list, show, generate and validate scenario banks")
    bsub = bank.add_subparsers(dest="bank_command", required=True)
    bsub.add_parser("list", help="shipped banks").set_defaults(fn=_bank_list)
    show = bsub.add_parser("show", help="families and counts of a bank (or one scenario)")
    show.add_argument("bank")
    show.add_argument("--split", choices=["train", "val", "test"])
    show.add_argument("--scenario", help="print this scenario as JSON")
    show.set_defaults(fn=_bank_show)
    gen = bsub.add_parser("generate", help="generate a bank reproducibly from a seed")
    gen.add_argument("--name", required=True)
    gen.add_argument("--per-family", type=int, help="scenarios per procedural family")
    gen.add_argument("--maps", nargs="+", help="OpenDRIVE files: town scenarios (routes + background traffic)")
    gen.add_argument("--per-map", type=int, help="scenarios per map, with --maps")
    gen.add_argument("--seed", type=int, required=True)
    gen.add_argument("--version", default="1.0.0")
    gen.add_argument("--families", help="comma-separated subset (default: all)")
    gen.add_argument("--description", default="")
    gen.add_argument(
        "--split-fractions",
        type=_fractions,
        default=(0.6, 0.2, 0.2),
        help="train,val,test shares of each family (default 0.6,0.2,0.2)",
    )
    gen.add_argument("--out", help="folder (default: scenarios/banks/NAME)")
    gen.set_defaults(fn=_bank_generate)
    val = bsub.add_parser("validate", help="validate a bank folder or a scenario file; exit 1 on problems")
    val.add_argument("path")
    val.set_defaults(fn=_bank_validate)

    maps = sub.add_parser("map", help="OpenDRIVE maps: a summary of the import, or a check against CARLA's client")
    msub = maps.add_subparsers(dest="map_command", required=True)
    info = msub.add_parser("info", help="JSON summary: roads, lanes by type, junctions, signals, warnings, load times")
    info.add_argument("path", help="an OpenDRIVE file (.xodr or .xodr.gz)")
    info.add_argument("--frame", choices=["carla", "opendrive"], default="carla", help="carla: y flipped (default)")
    info.add_argument("--no-cache", action="store_true", help="import afresh, without reading or writing the cache")
    info.set_defaults(fn=_map_info)
    check = msub.add_parser("check", help="JSON: lane-centre, width and heading errors and topology against carla.Map")
    check.add_argument("path", help="an OpenDRIVE file (.xodr or .xodr.gz)")
    check.add_argument("--every", type=float, default=2.0, help="metres between samples along each lane")
    check.set_defaults(fn=_map_check)
    fetch = msub.add_parser("fetch", help="save a running CARLA server's map as OpenDRIVE (to_opendrive); prints JSON")
    fetch.add_argument("--host", default="localhost")
    fetch.add_argument("--port", type=int, default=2000)
    fetch.add_argument("--town", help="load this town first if the server has another up")
    fetch.add_argument("--out", help="folder (default: the map cache's server/ folder)")
    fetch.set_defaults(fn=_map_fetch)

    srv = sub.add_parser("serve-rewards", help="HTTP reward service (enqueue / fetch, bearer token)")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8765)
    srv.add_argument("--workers", type=int, default=4)
    srv.add_argument("--max-bytes", type=int, default=1_000_000, help="largest accepted request body")
    srv.add_argument("--reward", action="append", help="extra reward 'module:function' (repeatable)")
    srv.add_argument(
        "--critic",
        default="rules",
        help="the consistency reward's critic: rules, hf:/local/model or an http(s):// endpoint (clients cannot pick)",
    )
    srv.add_argument("--request-timeout", type=float, default=10.0, help="seconds a request may take to arrive")
    srv.set_defaults(fn=_serve_rewards)

    # every flag but --out and --config sets the EvalConfig field named by its dest (a test checks it)
    ev = sub.add_parser("eval", help="closed-loop evaluation of an agent on a bank (journal, summary, report)")
    ev.add_argument("--out", required=True, help="run folder; rerunning into it finishes missing episodes")
    ev.add_argument("--config", help="eval TOML file; flags override it")
    ev.add_argument("--bank", help="bank name or folder (default smoke)")
    ev.add_argument("--agent", help="agent spec: expert, constant_velocity, stop, vla:PATH, sb3:PATH, pkg.mod:Cls")
    ev.add_argument("--routes", help="a Leaderboard 1.0 / 2.0 or Bench2Drive route file: run its routes")
    ev.add_argument("--maps", type=_comma_list, help="folders holding the route file's towns (CARLA's OpenDrive/)")
    ev.add_argument("--route-ids", dest="route_ids", help="routes to run, e.g. 0,3-5 (default: all)")
    ev.add_argument(
        "--strict", action="store_true", default=None, help="refuse routes with scenario types not supported"
    )
    ev.add_argument("--split", choices=["train", "val", "test"])
    ev.add_argument("--seeds", type=int, help="episodes per scenario (seeds 0..K-1)")
    ev.add_argument("--workers", type=int, help="Ray actors (0: in-process)")
    ev.add_argument("--ray-address", help="an existing Ray cluster, e.g. ray://head:10001 or auto")
    ev.add_argument("--rig", dest="rigs", type=_comma_list, help="camera rig(s), comma-separated: each is run")
    ev.add_argument("--scenarios", type=_comma_list, help="comma-separated subset of scenario ids")
    ev.add_argument("--episode-timeout", dest="episode_timeout_s", type=float, help="wall-clock seconds per episode")
    ev.add_argument("--video", action="store_true", default=None, help="an mp4 per episode (cameras, BEV, reasoning)")
    backends = "worldmodel: cameras from a learned model; carla: a CARLA server"
    ev.add_argument("--backend", choices=["embedded", "worldmodel", "carla"], help=backends)
    ev.add_argument("--world-model", help="a saved world model (RUN/checkpoints/final), for --backend worldmodel")
    ev.add_argument("--carla-host", help="the CARLA server's host, for --backend carla (default localhost)")
    ev.add_argument("--carla-port", type=int, help="its RPC port (default 2000)")
    ev.add_argument("--carla-container", help="a docker container to restart when the server stops answering")
    ev.set_defaults(fn=_eval)

    rg = sub.add_parser(
        "regress", help="paired comparison of a candidate run with a baseline run; exit 1 on regression"
    )
    draws = "one run, or one per training draw (the candidates' in the same order): the draws are pooled"
    rg.add_argument("--baseline", required=True, nargs="+", help=draws)
    rg.add_argument("--candidate", required=True, nargs="+", help=draws)
    rg.add_argument("--metric", default="leaderboard", help="suite to compare (leaderboard, pdms, alpasim, ...)")
    rg.add_argument(
        "--must-pass", help="comma-separated tags whose scenarios must keep succeeding ('all' for every one)"
    )
    rg.add_argument("--alpha", type=float, default=0.05)
    rg.add_argument("--test", default="bootstrap", choices=["bootstrap", "sign"])
    rg.add_argument("--tolerance", type=float, default=0.5, help="mean drop (points) below which nothing is flagged")
    rg.add_argument(
        "--out", help="folder for regress.md / .html / .json (default CANDIDATE/regress, or regress_draws for draws)"
    )
    rg.set_defaults(fn=_regress)

    rp = sub.add_parser("report", help="rebuild report.html of a run folder")
    rp.add_argument("run")
    rp.set_defaults(fn=_report)

    cp = sub.add_parser("compare", help="evaluation runs side by side: curvature ratio per rig, scores, videos")
    cp.add_argument("runs", nargs="+", metavar="LABEL=RUN", help="a label and a `loopdrive eval` run folder")
    cp.add_argument("--out", required=True, help="folder for compare.html / .md / .json")
    cp.set_defaults(fn=_compare)

    co = sub.add_parser("collect", help="record labelled driving data (zarr) for SFT; resumable")
    co.add_argument("--out", required=True, help="zarr path, e.g. data/core_train.zarr")
    add_model_flags(co, CollectSettings)  # every setting, as a recipe's [data] section has them
    co.set_defaults(fn=_collect)

    tr = sub.add_parser("train", help="training/run.py: SFT (and later RL) from a recipe")
    tr.add_argument("--config")
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    tr.add_argument("--run-dir")
    tr.add_argument("--resume", metavar="RUN_DIR")
    tr.set_defaults(fn=_train)

    demo = sub.add_parser(
        "demo", help="short SFT of the tiny VLA, then expert vs VLA vs baseline on a bank, with videos and reports"
    )
    demo.add_argument("--bank", default="smoke")
    demo.add_argument("--agents", default="expert,constant_velocity", help="comma-separated agent specs")
    demo.add_argument("--split", choices=["train", "val", "test"])
    demo.add_argument("--out", default="runs/demo")
    demo.add_argument("--no-video", action="store_true")
    demo.add_argument("--no-sft", action="store_true", help="skip the short SFT of the tiny VLA")
    demo.set_defaults(fn=_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (FileNotFoundError, KeyError, ValueError) as e:  # includes ScenarioError, AgentSpecError
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"loopdrive: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
