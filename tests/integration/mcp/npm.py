"""npm packages for the suite's outside clients, installed once per lockfile into the user's cache.

Each client lives in a folder of tests/integration/mcp with a ``package.json`` that pins exact versions
and the ``package-lock.json`` npm wrote for it; ``npm ci`` installs exactly that from the npm registry
(``--ignore-scripts``: nothing runs at install time) into ``~/.cache/switchboard-tests/<name>-<lock
hash>``, so a changed lock installs afresh and an unchanged one costs nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

INSTALL_TIMEOUT = 600


def npm_install(source: Path, *extra_files: str) -> Path:
    """The installed copy of ``source`` (its ``node_modules`` beside ``extra_files``, copied fresh)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node and npm are needed for this client")
    lock = (source / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "switchboard-tests"
    target = cache / f"{source.name}-{hashlib.sha256(lock).hexdigest()[:12]}"
    marker = target / "node_modules" / ".package-lock.json"
    if not marker.exists():
        target.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(source / name, target / name)
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=target,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, f"npm ci in {target} failed: {done.stderr[-2000:]}"
    for name in extra_files:
        shutil.copy(source / name, target / name)
    return target
