"""GRPO exploration: can a step-level group's branches tell a good decision from a bad one?

    python benchmarks/grpo_exploration.py [--config configs/grpo_tiny.toml] [--iterations 3]
        [--setting '{"branch": "before_failure"}' ...] [--out FILE]

Before any update, plans ``--iterations`` iterations of the recipe's step-level groups and runs them
with the recipe's starting policy, once per ``--setting`` (a JSON dict of ``[rl]`` keys laid over the
recipe). For each setting it prints the share of groups where some branch collides (or leaves the
road) and the share where branches *disagree* on it: only those groups carry a policy gradient about
that infraction. With a ``blocked`` reward term (weight 0 counts it without paying for it), the same
for stalls: standing still 2.5 s or more with nothing in the way. Also the mean within-group std of
the score. The default settings are the ones docs/experiments/rl.md quotes. Prints JSON (and writes
it with ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEFAULT_SETTINGS = [
    {},
    {"branch": "before_failure"},
    {"branch": "before_failure", "sampled_decisions": 4, "noise_level": 1.0},
    {"branch": "before_failure", "failure_lookback": 10, "sampled_decisions": 10, "stochastic": "all"},
    {
        "branch": "before_failure",
        "failure_lookback": 10,
        "sampled_decisions": 10,
        "stochastic": "all",
        "init_noise": 1.0,
    },
    {
        "branch": "before_failure",
        "failure_lookback": 10,
        "sampled_decisions": 10,
        "stochastic": "all",
        "noise_level": [3.0, 0.5],
    },
]


STALL_STEPS = 25  # a branch "stalls" when it stands blocked 2.5 s (25 simulator steps) or more


def _share(groups: list[list], term: str, disagree: bool, above: float = 0.0) -> float:
    hits = [{r.reward_terms.get(term, 0.0) > above for r in g} for g in groups]
    return sum((len(h) > 1) if disagree else (True in h) for h in hits) / max(1, len(groups))


def main(argv: list[str] | None = None) -> dict:
    import numpy as np
    import ray

    from benchmarks.machine import emit, machine_info
    from training.recipes import load_recipe
    from training.rl.grpo import branch_length, plan_tasks, scenario_pool, score_of
    from training.rl.rollouts import RolloutWorkers
    from training.rl.setup import env_config, module_config

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/grpo_tiny.toml")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--setting", action="append", type=json.loads, help="[rl] keys as JSON (repeatable)")
    p.add_argument("--out")
    args = p.parse_args(argv)

    recipe = load_recipe(args.config)
    if not Path(recipe.init_from or "").exists():
        hint = "train it first (see docs/how-to/fine-tune.md)"
        sys.exit(f"{args.config}: init_from {recipe.init_from!r} does not exist; {hint}")
    from agents.vla.model import VLA

    image_size = VLA.from_pretrained(recipe.init_from).config.image_size
    pool = scenario_pool(recipe)
    ray.init(num_cpus=max(2, recipe.rl.env_runners), include_dashboard=False, log_to_driver=False)
    results = []
    for setting in args.setting or DEFAULT_SETTINGS:
        rl = recipe.rl.model_validate(recipe.rl.model_dump() | setting)
        r = recipe.model_copy(update={"rl": rl})
        model = module_config(r, recipe.init_from) | {"eval_noise": 0.0}
        workers = RolloutWorkers(env_config(r, image_size), model, rl.env_runners, recipe.seed)
        t0, groups = time.perf_counter(), {}
        for it in range(args.iterations):
            tasks = plan_tasks(r, pool, it)
            for ro in workers.run(tasks, {"__seed__": np.array(it)}, "step", branch_length(rl)):
                groups.setdefault((it, ro.group), []).append(ro)
        workers.stop()
        gs = list(groups.values())
        results.append(
            {
                "setting": setting,
                "groups": len(gs),
                "collision_groups": round(_share(gs, "collision", False), 3),
                "collision_disagree": round(_share(gs, "collision", True), 3),
                "offroad_groups": round(_share(gs, "offroad", False), 3),
                "offroad_disagree": round(_share(gs, "offroad", True), 3),
                **(
                    {
                        "stall_groups": round(_share(gs, "blocked", False, STALL_STEPS), 3),
                        "stall_disagree": round(_share(gs, "blocked", True, STALL_STEPS), 3),
                    }
                    if "blocked" in (rl.rewards or {})
                    else {}
                ),
                "score_std_in_group": round(
                    float(np.mean([np.std([score_of(x, rl) for x in g], ddof=1) for g in gs])), 3
                ),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        print(json.dumps(results[-1]), file=sys.stderr)
    ray.shutdown()
    out = {
        "benchmark": "grpo_exploration",
        "machine": machine_info(),
        "policy": f"{recipe.init_from} (the recipe's start), before any update",
        "recipe": args.config,
        "results": results,
    }
    return emit(out, args.out)


if __name__ == "__main__":
    main()
