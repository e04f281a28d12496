"""Every damaged artefact of the fault catalogue gets a clean answer: its reader's own error naming the
damaged file, or (for a torn last line) a repair that loses nothing; never a traceback, a hang or a
silent load. The undamaged artefacts open, so a reader that refused everything would fail here too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from loopdrive.faults import FAULT_SETS, Fault, FaultSet, attempt

CASES = [pytest.param(s, f, id=f"{s.artefact}: {f.name}") for s in FAULT_SETS for f in s.faults]
UNDAMAGED = Fault("undamaged", lambda path: None, refused=False)


@pytest.fixture(scope="module")
def good_artefacts(tmp_path_factory) -> Callable[[FaultSet], Path]:
    """Each set's good artefact, built once, on first use."""
    built: dict[str, Path] = {}

    def good(faults: FaultSet) -> Path:
        if faults.artefact not in built:
            built[faults.artefact] = faults.build(tmp_path_factory.mktemp("good") / "artefact")
        return built[faults.artefact]

    return good


@pytest.mark.parametrize("faults", FAULT_SETS, ids=lambda s: s.artefact)
def test_the_undamaged_artefact_opens(faults, good_artefacts, tmp_path):
    outcome = attempt(faults, UNDAMAGED, good_artefacts(faults), tmp_path / "copy")
    assert outcome.result == "clean", outcome


@pytest.mark.parametrize(("faults", "fault"), CASES)
def test_a_damaged_artefact_gets_a_clean_answer(faults, fault, good_artefacts, tmp_path):
    outcome = attempt(faults, fault, good_artefacts(faults), tmp_path / "damaged")
    assert outcome.result == "clean", outcome
