"""docs/configuration.md documents every setting, and only real ones: the table cannot drift from
``Settings`` when someone adds a field."""

from __future__ import annotations

import re
from pathlib import Path

from switchboard.settings import Settings

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
ROW = re.compile(r"^\| `(SWITCHBOARD_[A-Z0-9_]+)` \|", re.MULTILINE)


def env_names() -> set[str]:
    names = set()
    for name, field in Settings.model_fields.items():
        names.add(field.alias if field.alias else f"SWITCHBOARD_{name.upper()}")
    return names


def test_every_setting_has_one_row_and_every_row_is_a_setting() -> None:
    rows = ROW.findall(DOC.read_text())
    assert len(rows) == len(set(rows)), "a setting is documented twice"
    assert set(rows) == env_names()
