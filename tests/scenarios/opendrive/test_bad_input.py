"""Bad OpenDRIVE input: every failure names the file, the element and the reason; defects that still leave a
faithful map are imported with a warning; a fuzz run finds nothing else (no crash, no hang)."""

from __future__ import annotations

import gzip
import random
import re
import time
from pathlib import Path

import pytest

from scenarios.opendrive import MapImportError, import_opendrive

ESMINI = Path(__file__).parents[2] / "data" / "opendrive" / "esmini"
TOWN02 = Path(__file__).parents[3] / "scenarios" / "towns" / "Town02.xodr.gz"
BASE = (ESMINI / "lane_width_and_offset.xodr").read_text()


def _import(text: str, tmp_path: Path, name: str = "bad.xodr"):
    path = tmp_path / name
    path.write_text(text)
    return import_opendrive(str(path))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t[: len(t) // 2], "not well-formed XML"),
        (lambda t: '<!DOCTYPE x [<!ENTITY a "aaaa">]>' + t, "DTD or entity"),
        (lambda t: "<OpenDRIVE><header/></OpenDRIVE>", "no <road>"),
        (lambda t: t.replace('length="10" id="4"', 'length="-3" id="4"'), "road 4: length -3"),
        (lambda t: t.replace('hdg="1"', 'hdg="abc"'), "road 4: <geometry> hdg='abc' is not a number"),
        (lambda t: t.replace('hdg="1"', 'hdg="nan"'), "hdg='nan' is not finite"),
        (lambda t: t.replace("<line/>", "<clothoid/>"), "needs one of"),
        (lambda t: t.replace('<lane id="-1"', '<lane id="minus one"'), "lane section 0 (s=0): <lane> id='minus one'"),
        (lambda t: t.replace('<lane id="-1"', '<lane id="2"'), "lane 2 is under <right>"),
        (
            lambda t: t.replace(
                'a="0.0" b="1" c="0.0" d="0.0"/>\n                  <width', 'a="x" b="1"/>\n<width', 1
            ),
            "lane -1: <width> a='x' is not a number",
        ),
        (
            lambda t: t.replace("<planView>", "<planView/><ignored>").replace("</planView>", "</ignored>"),
            "no <planView> geometry",
        ),
        (
            lambda t: t.replace("</road>", "</road>" + t[t.index("<road") : t.index("</road>") + 7]),
            "road 4 defined twice",
        ),
    ],
)
def test_a_broken_file_is_an_error_naming_file_element_and_reason(tmp_path, change, message):
    with pytest.raises(MapImportError) as e:
        _import(change(BASE), tmp_path)
    assert str(e.value).startswith(str(tmp_path / "bad.xodr")) and message in str(e.value), str(e.value)


def test_unreadable_files_are_errors(tmp_path):
    with pytest.raises(MapImportError, match="cannot be read"):
        import_opendrive(str(tmp_path / "missing.xodr"))
    (tmp_path / "latin.xodr").write_bytes(BASE.replace("lane_offset", "caf\xe9").encode("latin-1"))
    with pytest.raises(MapImportError, match="not UTF-8"):
        import_opendrive(str(tmp_path / "latin.xodr"))
    (tmp_path / "cut.xodr.gz").write_bytes(gzip.compress(BASE.encode())[:40])
    with pytest.raises(MapImportError, match=r"cut\.xodr\.gz"):
        import_opendrive(str(tmp_path / "cut.xodr.gz"))


def test_defects_that_leave_a_faithful_map_are_imported_with_a_warning(tmp_path):
    text = BASE.replace(
        "<link>\n        </link>", '<link><successor elementType="road" elementId="99" contactPoint="start"/></link>'
    )
    text = text.replace("<lanes>", '<type s="0" type="town"><speed max="30" unit="furlongs/fortnight"/></type><lanes>')
    road_map, report = _import(text, tmp_path)
    assert road_map.lanes
    assert any("link to missing road 99" in w for w in report.warnings)
    assert any("speed unit 'furlongs/fortnight' unknown" in w for w in report.warnings)


def _mutations(text: str, rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:  # truncated
        return text[: rng.randrange(len(text))]
    numbers = [m.span(1) for m in re.finditer(r'="(-?[0-9.e+-]+)"', text)]
    if kind == 1 and numbers:  # a number replaced by garbage or an extreme
        a, b = rng.choice(numbers)
        return text[:a] + rng.choice(["x", "", "1e308", "-1e308", "inf", "-0", "1e-320", "99999999999"]) + text[b:]
    lines = text.splitlines()
    i = rng.randrange(len(lines))
    if kind == 2:  # a line dropped
        return "\n".join(lines[:i] + lines[i + 1 :])
    if kind == 3:  # a line repeated
        return "\n".join(lines[: i + 1] + lines[i:])
    a, b = rng.randrange(len(text)), rng.randrange(len(text))  # a slice swapped in
    return text[: min(a, b)] + text[max(a, b) : max(a, b) + 200] + text[max(a, b) :]


def test_fuzzed_files_give_import_errors_or_maps_never_a_crash_or_a_hang(tmp_path):
    rng = random.Random(7)
    sources = [p.read_text() for p in sorted(ESMINI.glob("*.xodr"))] + [gzip.decompress(TOWN02.read_bytes()).decode()]
    outcomes = {"imported": 0, "refused": 0}
    for i in range(240):
        text = _mutations(rng.choice(sources), rng)
        t0 = time.perf_counter()
        try:
            _import(text, tmp_path, f"fuzz{i}.xodr")
            outcomes["imported"] += 1
        except MapImportError as e:
            assert f"fuzz{i}.xodr" in str(e)
            outcomes["refused"] += 1
        assert time.perf_counter() - t0 < 10.0
    assert outcomes["imported"] > 20 and outcomes["refused"] > 20, outcomes
