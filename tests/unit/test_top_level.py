"""Issue 31: the top of the package shows the architecture. Only the settings, the console script, the
ASGI app and the instance's services are modules there; everything else lives in a package named for
what it serves (docs/architecture.md lists each in one line)."""

from __future__ import annotations

from pathlib import Path

import switchboard

PACKAGE = Path(switchboard.__file__).parent
ALLOWED = {"__init__.py", "settings.py", "entry.py", "app.py", "services.py"}


def test_the_top_level_holds_packages_and_at_most_five_modules() -> None:
    modules = {p.name for p in PACKAGE.glob("*.py")}
    assert modules <= ALLOWED, f"loose modules at the top: {sorted(modules - ALLOWED)}"


def test_architecture_md_names_every_package() -> None:
    picture = (PACKAGE.parent.parent / "docs" / "architecture.md").read_text()
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    missing = [name for name in packages if f"  {name}/ " not in picture]
    assert packages and not missing, f"docs/architecture.md does not name: {missing}"
