"""Agents by spec string: ``expert``, ``constant_velocity``, ``stop``, ``vla:PATH`` (a saved VLA;
``vla:PATH?reasoning=0`` for trajectory only, ``&noise=0`` for the deterministic plan), ``sb3:PATH``
(a stable-baselines3 zip, loaded without pickle), or ``my_pkg.agents:MyAgent``."""

from __future__ import annotations

from collections.abc import Callable

from agents.base import Agent
from agents.baselines import ConstantVelocity, Stop
from agents.expert import Expert
from loopdrive.plugins import load_object

BUILTIN: dict[str, Callable[[], Agent]] = {"expert": Expert, "constant_velocity": ConstantVelocity, "stop": Stop}


class AgentSpecError(ValueError):
    pass


def load_agent(spec: str) -> Agent:
    """Build an agent from its spec; a wrong spec raises ``AgentSpecError`` saying why."""
    if spec in BUILTIN:
        return BUILTIN[spec]()
    if spec.startswith("vla:"):
        from pathlib import Path
        from urllib.parse import parse_qs

        from agents.vla.agent import VLAAgent
        from agents.vla.checkpoint import CheckpointError

        path, _, query = spec[4:].partition("?")
        if not (Path(path) / "vla_config.json").exists():
            raise AgentSpecError(f"agent {spec!r}: {path} is not a saved VLA (no vla_config.json)")
        options = {k: v[-1] for k, v in parse_qs(query).items()}
        unknown = sorted(set(options) - {"reasoning", "noise"})
        if unknown:
            raise AgentSpecError(f"agent {spec!r}: unknown option(s) {unknown}; use reasoning=0|1, noise=<scale>")
        try:
            noise = float(options.get("noise", 1.0))
        except ValueError:
            raise AgentSpecError(f"agent {spec!r}: noise must be a number, got {options['noise']!r}") from None
        try:
            return VLAAgent(path, reasoning=options.get("reasoning", "1") != "0", noise_scale=noise)
        except CheckpointError as e:
            raise AgentSpecError(f"agent {spec!r}: {e}") from None
    if spec.startswith("sb3:"):
        from agents.sb3 import SB3Agent, SB3FormatError

        try:
            return SB3Agent(spec[4:])
        except SB3FormatError as e:
            raise AgentSpecError(f"agent {spec!r}: {e}") from None
    if ":" not in spec:
        raise AgentSpecError(f"unknown agent {spec!r}: use one of {sorted(BUILTIN)} or 'package.module:ClassName'")
    factory = load_object(spec, "agent", AgentSpecError)
    try:
        agent = factory()
    except TypeError as e:
        raise AgentSpecError(f"agent {spec!r}: cannot be built without arguments: {e}") from None
    for method in ("reset", "act"):
        if not callable(getattr(agent, method, None)):
            raise AgentSpecError(f"agent {spec!r}: has no {method}() method (see agents.Agent)")
    return agent
