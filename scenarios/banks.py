"""Scenario banks: folders of scenario files plus ``bank.toml``, generated reproducibly from a seed.

``load_bank("core", split="test")`` finds a bank shipped in ``scenarios/banks/`` (or any folder
path), validates every file and returns the scenarios sorted by id. ``validate_path`` collects every
problem of every file instead of stopping at the first, so ``loopdrive bank validate`` can list them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from scenarios.families import FAMILIES, build_family_map, make_scenario
from scenarios.files import MAX_MAP_BYTES, read_mapping
from scenarios.maps import RoadMap
from scenarios.schema import BankManifest, Scenario, ScenarioError, format_validation_error

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

BANKS_DIR = Path(__file__).parent / "banks"
SCENARIO_SUFFIXES = (".json", ".yaml", ".yml")


@dataclass
class Bank:
    manifest: BankManifest
    path: Path
    scenarios: list[Scenario]
    refused: dict[str, str] = field(default_factory=dict)  # (route files) routes that could not be made: why

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    def __len__(self) -> int:
        return len(self.scenarios)

    def __iter__(self):
        return iter(self.scenarios)

    def get(self, scenario_id: str) -> Scenario:
        for s in self.scenarios:
            if s.id == scenario_id:
                return s
        raise KeyError(f"bank {self.name!r} has no scenario {scenario_id!r}")


def bank_names() -> list[str]:
    return sorted(p.name for p in BANKS_DIR.iterdir() if (p / "bank.toml").exists()) if BANKS_DIR.exists() else []


def resolve_bank_path(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if (p / "bank.toml").exists():
        return p
    if (BANKS_DIR / str(name_or_path) / "bank.toml").exists():
        return BANKS_DIR / str(name_or_path)
    raise FileNotFoundError(
        f"no scenario bank {str(name_or_path)!r}: not a folder with bank.toml, nor a shipped bank {bank_names()}"
    )


# --- maps ---------------------------------------------------------------------------------------------
def load_map(scenario: Scenario, base_dir: Path | None = None) -> RoadMap:
    """The scenario's road map: its procedural family's, its JSON map file's, or its OpenDRIVE file's
    (``.xodr`` / ``.xodr.gz``; a relative path against ``base_dir``; ``load_scenario`` has already made
    it absolute)."""
    spec = scenario.map
    if spec.family is not None:
        return build_family_map(spec.family, spec.params)
    path = Path(spec.file)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if path.name.endswith((".xodr", ".xodr.gz")):  # an OpenDRIVE map (a CARLA town), in CARLA's frame
        from scenarios.opendrive.cache import load_map as load_opendrive

        return load_opendrive(path)[0]
    data = read_mapping(path, MAX_MAP_BYTES)
    try:
        return RoadMap.from_dict(data)
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a road map ({type(e).__name__}: {e})") from None


def check_references(scn: Scenario, road_map: RoadMap) -> list[str]:
    """Problems a schema cannot see: unknown lanes / signals, broken routes, positions off their lane."""
    out: list[str] = []
    lanes = road_map.lanes

    def lane_ok(lane_id: str, where: str) -> bool:
        if lane_id not in lanes:
            out.append(f"{where}: unknown lane {lane_id!r}")
            return False
        return True

    if lane_ok(scn.ego.lane, "ego.lane") and scn.ego.s > lanes[scn.ego.lane].length:
        out.append(
            f"ego.s: {scn.ego.s} is beyond the end of lane {scn.ego.lane!r} ({lanes[scn.ego.lane].length:.1f} m)"
        )
    route = scn.ego.route
    for i, lane_id in enumerate(route):
        if lane_ok(lane_id, f"ego.route[{i}]") and i > 0 and route[i - 1] in lanes:
            change = road_map.is_lane_change(route[i - 1], lane_id)
            if lane_id not in lanes[route[i - 1]].successors and not change:
                out.append(f"ego.route[{i}]: lane {lane_id!r} neither follows {route[i - 1]!r} nor lies beside it")
            elif change and i > 1 and route[i - 2] in lanes and road_map.is_lane_change(route[i - 2], route[i - 1]):
                out.append(f"ego.route[{i}]: a second lane change in a row (one per lane)")
    for k, a in enumerate(scn.actors):
        where = f"actors[{k}]"
        if a.lane is not None and lane_ok(a.lane, f"{where}.lane") and a.s > lanes[a.lane].length:
            out.append(f"{where}.s: {a.s} is beyond the end of lane {a.lane!r}")
        for i, lane_id in enumerate(a.path or []):
            lane_ok(lane_id, f"{where}.path[{i}]")
        if a.behaviour.type == "lane_change":
            lane_ok(a.behaviour.target_lane, f"{where}.behaviour.target_lane")
    for sig in scn.signals:
        if sig not in road_map.signals:
            out.append(f"signals.{sig}: the map has no signal {sig!r} (has {sorted(road_map.signals)})")
    return out


# --- loading and validation ----------------------------------------------------------------------------
def load_scenario(path: str | Path) -> Scenario:
    """Parse and fully validate one scenario file; raises ScenarioError naming file, field and reason."""
    path = Path(path)
    try:
        data = read_mapping(path)
    except (OSError, ValueError) as e:
        raise ScenarioError([f"{path}: <file>: cannot read: {e}"]) from None
    return parse_scenario(data, source=path)


def parse_scenario(data: dict, source: str | Path = "<scenario>") -> Scenario:
    """Validate a scenario (a map file by a relative path is resolved against the file's folder, so
    the scenario means the same from any working directory)."""
    try:
        scn = Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(format_validation_error(e, source)) from None
    if scn.map.file is not None and isinstance(source, Path) and not Path(scn.map.file).is_absolute():
        scn.map.file = str((source.parent / scn.map.file).resolve())
    try:
        road_map = load_map(scn)
    except (KeyError, TypeError, ValueError, OSError) as e:
        field = "map.file" if scn.map.file is not None else "map.params"
        raise ScenarioError([f"{source}: {field}: {e}"]) from None
    problems = check_references(scn, road_map)
    if problems:
        raise ScenarioError([f"{source}: {p}" for p in problems])
    return scn


def validate_path(path: str | Path) -> list[str]:
    """Every problem in a bank folder (or a single scenario file), as ``file: field: reason`` lines."""
    path = Path(path)
    if path.is_file():
        try:
            load_scenario(path)
        except ScenarioError as e:
            return e.problems
        return []
    problems: list[str] = []
    manifest_path = path / "bank.toml"
    if not manifest_path.exists():
        return [f"{manifest_path}: <file>: missing (a bank is a folder with bank.toml)"]
    try:
        BankManifest.model_validate(tomllib.loads(manifest_path.read_text()))
    except tomllib.TOMLDecodeError as e:
        problems.append(f"{manifest_path}: <file>: {e}")
    except ValidationError as e:
        problems += format_validation_error(e, manifest_path)
    ids: dict[str, Path] = {}
    for f in sorted(_scenario_files(path)):
        try:
            scn = load_scenario(f)
        except ScenarioError as e:
            problems += e.problems
            continue
        if scn.id in ids:
            problems.append(f"{f}: id: duplicate scenario id {scn.id!r} (also in {ids[scn.id].name})")
        ids[scn.id] = f
    return problems


def _scenario_files(path: Path) -> list[Path]:
    root = path / "scenarios" if (path / "scenarios").is_dir() else path
    return [p for p in root.iterdir() if p.suffix in SCENARIO_SUFFIXES]


def load_bank(name_or_path: str | Path, split: str | None = None) -> Bank:
    """A shipped bank by name, a bank folder, or a route file's routes (a ``routes:`` spec, see
    :class:`scenarios.routes.RouteBankSpec`)."""
    from scenarios.routes import RouteBankSpec

    if RouteBankSpec.names(name_or_path):
        return _route_file_bank(str(name_or_path), split)
    path = resolve_bank_path(name_or_path)
    try:
        manifest = BankManifest.model_validate(tomllib.loads((path / "bank.toml").read_text()))
    except ValidationError as e:
        raise ScenarioError(format_validation_error(e, path / "bank.toml")) from None
    scenarios, problems = [], []
    for f in sorted(_scenario_files(path)):
        try:
            scenarios.append(load_scenario(f))
        except ScenarioError as e:
            problems += e.problems
    if problems:
        raise ScenarioError(problems)
    if split is not None:
        if split not in ("train", "val", "test"):
            raise ValueError(f"unknown split {split!r}: use train, val or test")
        scenarios = [s for s in scenarios if s.split == split]
    scenarios.sort(key=lambda s: s.id)
    return Bank(manifest, path, scenarios)


def _route_file_bank(text: str, split: str | None) -> Bank:
    from scenarios.routes import RouteBankSpec, route_bank

    spec = RouteBankSpec.parse(text)
    scenarios, refused, sha = route_bank(spec)
    manifest = BankManifest(
        name=f"routes:{Path(spec.file).name}",
        version=sha[:12],
        description=f"the routes of {spec.file}",
        seed=spec.seed,
        families=["route"],
        count=len(scenarios),
        splits={"test": len(scenarios)},
        generator={"routes": spec.file, "maps": list(spec.maps), "route_ids": spec.route_ids},
    )
    if split is not None and split != "test":
        scenarios = []  # a route file is a test set
    return Bank(manifest, Path(spec.file), scenarios, refused)


# --- generation ----------------------------------------------------------------------------------------
def generate_bank(
    out: str | Path,
    name: str,
    per_family: int,
    seed: int,
    version: str = "1.0.0",
    families: list[str] | None = None,
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    description: str = "",
) -> Bank:
    """Sample ``per_family`` scenarios of each family from ``seed``; write files and bank.toml.

    Splits are stratified per family (train / val / test fractions), so every family appears in
    every split once ``per_family`` is large enough; with one scenario per family it goes to test.
    """
    out = Path(out)
    families = families or sorted(FAMILIES)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise KeyError(f"unknown families {unknown}; known: {sorted(FAMILIES)}")
    scen_dir = out / "scenarios"
    scen_dir.mkdir(parents=True, exist_ok=True)
    for old in scen_dir.glob("*.json"):
        old.unlink()
    root = np.random.SeedSequence(seed)
    counts = {"train": 0, "val": 0, "test": 0}
    for fam_name, fam_seq in zip(families, root.spawn(len(families))):
        fam = FAMILIES[fam_name]
        n_train = int(round(per_family * split_fractions[0]))
        n_val = int(round(per_family * split_fractions[1]))
        if per_family == 1:
            n_train = n_val = 0
        for k, seq in enumerate(fam_seq.spawn(per_family)):
            rng = np.random.default_rng(seq)
            params = fam.sample_params(rng)
            split = "train" if k < n_train else "val" if k < n_train + n_val else "test"
            scn_seed = int(rng.integers(2**31 - 1))
            scn = make_scenario(fam_name, params, scn_seed, f"{fam_name}-{k:03d}", split)
            counts[split] += 1
            (scen_dir / f"{scn.id}.json").write_text(
                json.dumps(scn.model_dump(mode="json", exclude_none=True), indent=1) + "\n"
            )
    manifest = BankManifest(
        name=name,
        version=version,
        description=description,
        seed=seed,
        families=families,
        count=sum(counts.values()),
        splits={k: v for k, v in counts.items() if v},
        generator={"per_family": per_family, "split_fractions": list(split_fractions)},
    )
    (out / "bank.toml").write_text(manifest_toml(manifest))
    return load_bank(out)


def manifest_toml(m: BankManifest) -> str:
    q = json.dumps
    lines = [
        f"name = {q(m.name)}",
        f"version = {q(m.version)}",
        f"description = {q(m.description)}",
        f"seed = {m.seed}",
        f"count = {m.count}",
        "families = [" + ", ".join(q(f) for f in m.families) + "]",
        "",
        "[splits]",
        *[f"{k} = {v}" for k, v in m.splits.items()],
        "",
        "[generator]",
        *[f"{k} = {q(v)}" for k, v in m.generator.items()],
    ]
    return "\n".join(lines) + "\n"
