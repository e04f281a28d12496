"""Agents by spec string: ``expert`` (``expert?time_headway=S&min_gap=M&caution_speed=V`` for another
driving style: a close follower's states, labelled by the expert, are data the expert's own lack),
``constant_velocity``, ``stop``, ``vla:PATH`` (a saved VLA;
``vla:PATH?reasoning=0`` for trajectory only, ``&noise=0`` for the deterministic plan, ``&steps=N`` for
N denoising steps instead of the model's own, ``&guidance=W`` for context guidance, ``&hold=N`` to hold a
lane change, ``&route_shift=M`` to move the route the plan reads M metres into the lane it holds,
``&perception=oracle`` for the privileged world's answers in place of the probe's, or
``&perception=lead_gap,lead_closing_speed`` for those answers only, ``&closing=tracked`` for the
closing speed read as the gap's fall between decisions), ``alpamayo:PATH``
(a checkpoint in Alpamayo-R1's released layout; ``?base=DIR`` for its base VLM folder), ``sb3:PATH``
(a stable-baselines3 zip, loaded without pickle), or ``my_pkg.agents:MyAgent``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs

from agents.base import Agent, ObservationSetup
from agents.baselines import ConstantVelocity, Stop
from agents.expert import Expert
from loopdrive.plugins import load_object

BUILTIN: dict[str, Callable[[], Agent]] = {"expert": Expert, "constant_velocity": ConstantVelocity, "stop": Stop}
# vla:PATH?option=value&...
VLA_OPTIONS = {
    "reasoning": "0|1",
    "noise": "<scale>",
    "steps": "<n >= 1>",
    "guidance": "<w> or <w_accel>,<w_lateral>",
    "hold": "<decisions >= 0>",
    "route_shift": "<metres >= 0, with hold>",
    "perception": "probe|oracle|<targets from the world, e.g. lead_gap,lead_closing_speed>",
    "closing": "probe|tracked",
}
# expert?option=value&...: the expert's driving style (its constructor's arguments)
EXPERT_OPTIONS = {"time_headway": "<s > 0>", "min_gap": "<m > 0>", "caution_speed": "<m/s > 0>"}


class AgentSpecError(ValueError):
    pass


def _path_and_options(spec: str, allowed: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``kind:PATH?key=value&...`` -> (PATH, options); an unknown option is an ``AgentSpecError``."""
    path, _, query = spec.partition(":")[2].partition("?")
    return path, _options(spec, query, allowed)


def _options(spec: str, query: str, allowed: dict[str, str]) -> dict[str, str]:
    """``key=value&...`` -> the options; an unknown one is an ``AgentSpecError``."""
    options = {k: v[-1] for k, v in parse_qs(query).items()}
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        usage = ", ".join(f"{k}={v}" for k, v in allowed.items())
        raise AgentSpecError(f"agent {spec!r}: unknown option(s) {unknown}; use {usage}")
    return options


def _number(spec: str, options: dict[str, str], key: str, default: float) -> float:
    try:
        return float(options.get(key, default))
    except ValueError:
        raise AgentSpecError(f"agent {spec!r}: {key} must be a number, got {options[key]!r}") from None


def _guidance(spec: str, options: dict[str, str]) -> tuple[float, ...] | None:
    """``guidance=w`` or ``guidance=w_accel,w_lateral`` -> the weights (None when not given)."""
    if "guidance" not in options:
        return None
    try:
        weights = tuple(float(w) for w in options["guidance"].split(","))
    except ValueError:
        weights = ()
    if len(weights) not in (1, 2):
        raise AgentSpecError(f"agent {spec!r}: guidance must be w or w_accel,w_lateral, got {options['guidance']!r}")
    return weights


def load_agent(spec: str) -> Agent:
    """Build an agent from its spec; a wrong spec raises ``AgentSpecError`` saying why."""
    if spec in BUILTIN:
        return BUILTIN[spec]()
    if spec.startswith("expert?"):
        options = _options(spec, spec.partition("?")[2], EXPERT_OPTIONS)
        style = {k: _number(spec, options, k, 0.0) for k in options}
        if any(value <= 0 for value in style.values()):
            raise AgentSpecError(f"agent {spec!r}: the expert's options must be positive numbers")
        return Expert(**style)
    if spec.startswith("vla:"):
        from agents.vla.agent import VLAAgent

        path, options = _path_and_options(spec, VLA_OPTIONS)
        if not (Path(path) / "vla_config.json").exists():
            raise AgentSpecError(f"agent {spec!r}: {path} is not a saved VLA (no vla_config.json)")
        steps = _number(spec, options, "steps", 0)
        if "steps" in options and (steps < 1 or steps != int(steps)):
            raise AgentSpecError(f"agent {spec!r}: steps must be a whole number >= 1, got {options['steps']!r}")
        noise, guidance = _number(spec, options, "noise", 1.0), _guidance(spec, options)
        hold = _number(spec, options, "hold", 0)
        if hold < 0 or hold != int(hold):
            raise AgentSpecError(f"agent {spec!r}: hold must be a whole number >= 0, got {options['hold']!r}")
        try:
            return VLAAgent(
                path,
                reasoning=options.get("reasoning", "1") != "0",
                noise_scale=noise,
                flow_steps=int(steps) or None,
                guidance=guidance,
                hold=int(hold),
                route_shift=_number(spec, options, "route_shift", 0.0),
                perception=options.get("perception", "probe"),
                closing=options.get("closing", "probe"),
            )
        except ValueError as e:  # a damaged checkpoint (CheckpointError), or an option it cannot do
            raise AgentSpecError(f"agent {spec!r}: {e}") from None
    if spec.startswith("alpamayo:"):
        from agents.alpamayo.agent import AlpamayoAgent
        from agents.vla.checkpoint import CheckpointError

        allowed = {"base": "<base VLM folder>", "reasoning": "0|1", "temperature": "<t>", "noise": "<scale>"}
        path, options = _path_and_options(spec, allowed)
        try:
            return AlpamayoAgent(
                path,
                base=options.get("base"),
                reasoning=options.get("reasoning", "1") != "0",
                temperature=_number(spec, options, "temperature", 0.6),
                noise_scale=_number(spec, options, "noise", 1.0),
            )
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


def trained_observation(spec: str) -> ObservationSetup | None:
    """The observation set-up a ``vla:PATH`` agent was trained on (:func:`recorded_observation`); None for
    other agents."""
    if not spec.startswith("vla:"):
        return None
    return recorded_observation(_path_and_options(spec, VLA_OPTIONS)[0])


def is_saved_vla(spec: str) -> bool:
    """Whether a ``vla:PATH`` agent's folder holds a saved VLA (its ``vla_config.json``)."""
    return spec.startswith("vla:") and (Path(_path_and_options(spec, VLA_OPTIONS)[0]) / "vla_config.json").is_file()


def recorded_observation(path: str | Path) -> ObservationSetup | None:
    """The observation set-up a saved VLA records in its ``vla_config.json``, read without loading the
    model; None for VLAs saved before SFT recorded it and for a folder that is not a readable VLA
    (:func:`load_agent` then says what is wrong with it)."""
    try:
        recorded = json.loads((Path(path) / "vla_config.json").read_text())["vla"].get("observation")
        return None if recorded is None else ObservationSetup.model_validate(recorded)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
