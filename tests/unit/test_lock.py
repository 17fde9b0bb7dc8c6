"""The lock files agree with pyproject.toml: every dependency is pinned, with hashes, at a version its
range allows, and the runtime lock (the image, scripts/serve) pins what the test lock (CI) pins, so the
suite runs the versions that ship."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s\\]+)", re.MULTILINE)


def pins(name: str) -> dict[str, str]:
    text = (ROOT / name).read_text()
    found = {canonicalize_name(n): v for n, v in PIN.findall(text)}
    blocks = [block for block in re.split(r"\n(?=[A-Za-z0-9])", text) if PIN.match(block)]
    unhashed = [block.split()[0] for block in blocks if "--hash=sha256:" not in block]
    assert not unhashed, f"{name}: pins without hashes: {unhashed}"
    return found


def requirements(extra: str | None) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return [Requirement(text) for text in listed]


def _outside(reqs: list[Requirement], locked: dict[str, str]) -> list[str]:
    problems = []
    for req in reqs:
        version = locked.get(canonicalize_name(req.name))
        if version is None:
            problems.append(f"{req.name}: not locked")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name}=={version} outside {req.specifier}")
    return problems


def test_every_range_is_narrowed_from_above_and_below() -> None:
    loose = [
        str(req)
        for req in requirements(None) + requirements("test")
        if not any(spec.operator in ("<", "==", "~=") for spec in req.specifier)
        or not any(spec.operator in (">=", "==", "~=") for spec in req.specifier)
    ]
    assert loose == [], f"give these a tested range (lower and upper bound): {loose}"


def test_the_test_lock_pins_every_dependency_within_its_range() -> None:
    locked = pins("requirements-test.lock")
    assert _outside(requirements(None) + requirements("test"), locked) == []


def test_the_runtime_lock_is_the_test_lock_without_the_test_tools() -> None:
    runtime, test = pins("requirements.lock"), pins("requirements-test.lock")
    assert _outside(requirements(None), runtime) == []
    differs = {name: (v, test.get(name)) for name, v in runtime.items() if test.get(name) != v}
    assert differs == {}, f"runtime pins that differ from the test lock (run scripts/lock): {differs}"
    for tool in ("pytest", "ruff", "mypy", "playwright"):
        assert tool not in runtime
