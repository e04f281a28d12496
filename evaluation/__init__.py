"""Closed-loop evaluation: run an agent on a scenario bank (in-process or on Ray workers) into a run
folder with a journal, a summary, a report and videos; compare two runs (regression) or several side
by side; measure a straight-driving bias (the curvature ratio)."""

from evaluation.compare import write_comparison
from evaluation.config import EvalConfig, EvalConfigError, load_eval_config
from evaluation.episode import STATUSES, EpisodeRunner, Task
from evaluation.journal import Journal, read_episodes
from evaluation.runner import evaluate, plan_tasks
from evaluation.steering import SteeringSums, pooled_ratio
from evaluation.summary import bootstrap_ci, summarize

__all__ = [
    "STATUSES",
    "EpisodeRunner",
    "EvalConfig",
    "EvalConfigError",
    "Journal",
    "SteeringSums",
    "Task",
    "bootstrap_ci",
    "evaluate",
    "load_eval_config",
    "plan_tasks",
    "pooled_ratio",
    "read_episodes",
    "summarize",
    "write_comparison",
]
