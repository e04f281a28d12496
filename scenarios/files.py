"""Reading files a user or an attacker may hand us: scenario files, JSON road maps.

Every read is bounded: only regular files (not ``/dev/zero``, not a folder), at most a size limit,
valid UTF-8, JSON nested at most ``MAX_DEPTH`` deep (checked on the bytes before parsing), YAML
parsed safely with its aliases expanded at most ``MAX_YAML_VALUES`` values (a 1 kB "billion laughs"
file is refused, not expanded). Failures raise ``ValueError`` saying what is wrong; callers add
the file's name and the field.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import yaml

MAX_SCENARIO_BYTES = 8 * 2**20
MAX_MAP_BYTES = 256 * 2**20
MAX_DEPTH = 64
MAX_YAML_VALUES = 1_000_000

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_STEP = np.zeros(256, np.int32)
_STEP[[ord("["), ord("{")]], _STEP[[ord("]"), ord("}")]] = 1, -1


def read_bytes(path: Path, limit: int) -> bytes:
    """The file's bytes: a regular file of at most ``limit`` bytes."""
    st = path.stat()  # FileNotFoundError / PermissionError are OSErrors the caller reports
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path} is not a regular file")
    if st.st_size > limit:
        raise ValueError(f"{st.st_size:,} bytes, over the {limit:,}-byte limit")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew while we looked
        raise ValueError(f"over the {limit:,}-byte limit")
    return data


def json_depth(raw: bytes) -> int:
    """How deep the brackets of a JSON text nest (strings ignored), in a few vectorised passes."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return int(np.cumsum(_STEP[np.frombuffer(brackets, np.uint8)]).max(initial=0))


def parse_json(raw: bytes) -> Any:
    if json_depth(raw) > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return json.loads(raw.decode("utf-8"))


def parse_yaml(raw: bytes) -> Any:
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"YAML nested deeper than this reader allows ({MAX_DEPTH} levels)") from None
    values, depth = _expanded_size(data)
    if values > MAX_YAML_VALUES:
        raise ValueError(f"YAML aliases expand to more than {MAX_YAML_VALUES:,} values")
    if depth > MAX_DEPTH:
        raise ValueError(f"YAML nested deeper than {MAX_DEPTH} levels")
    return data


def _expanded_size(data: Any) -> tuple[int, int]:
    """(values, depth) of ``data`` as a tree, with shared (aliased) parts counted at every use;
    computed over the distinct objects, so an alias bomb costs as little to measure as to parse."""
    memo: dict[int, tuple[int, int]] = {}
    order, stack, seen = [], [data], set()
    while stack:  # children before parents, without recursion
        node = stack.pop()
        if id(node) in seen or not isinstance(node, (dict, list)):
            continue
        seen.add(id(node))
        order.append(node)
        stack.extend(node.values() if isinstance(node, dict) else node)
    for node in reversed(order):
        children = node.values() if isinstance(node, dict) else node
        values, depth = 1, 1
        for child in children:
            v, d = memo.get(id(child), (1, 0))
            values, depth = values + v, max(depth, d + 1)
            if values > MAX_YAML_VALUES:
                break
        memo[id(node)] = (values, depth)
    return memo.get(id(data), (1, 0))


def read_mapping(path: Path, limit: int = MAX_SCENARIO_BYTES) -> dict[str, Any]:
    """A JSON (``.json``) or YAML file whose top level is a mapping."""
    raw = read_bytes(path, limit)
    try:
        data = parse_json(raw) if path.suffix == ".json" else parse_yaml(raw)
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"top level must be a mapping, got {type(data).__name__}")
    return data
