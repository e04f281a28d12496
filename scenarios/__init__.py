"""Scenarios: schema and validation, road maps, procedural families and versioned banks."""

from scenarios.banks import (
    Bank,
    bank_names,
    generate_bank,
    load_bank,
    load_map,
    load_scenario,
    parse_scenario,
    validate_path,
)
from scenarios.families import FAMILIES, Choice, Family, Range, build_family_map, make_scenario
from scenarios.maps import Crosswalk, Lane, RoadMap, Signal, StopLine
from scenarios.schema import ActorSpec, BankManifest, EgoSpec, Scenario, ScenarioError

__all__ = [
    "FAMILIES",
    "ActorSpec",
    "Bank",
    "BankManifest",
    "Choice",
    "Crosswalk",
    "EgoSpec",
    "Family",
    "Lane",
    "Range",
    "RoadMap",
    "Scenario",
    "ScenarioError",
    "Signal",
    "StopLine",
    "bank_names",
    "build_family_map",
    "generate_bank",
    "load_bank",
    "load_map",
    "load_scenario",
    "make_scenario",
    "parse_scenario",
    "validate_path",
]
