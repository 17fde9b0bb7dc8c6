"""The README's quick start, run line by line from a fresh clone (issue 17): the ```sh block under "Five
minutes to a working queue" is parsed out of the clone's README.md and run as it is by bash, so the
README and this test cannot drift. It serves, runs the CLI lines, has the endpoint create its notify hook
with ``switchboard call create_notify_hook``, receives a signed Gitea push, and ``switchboard listen``
(HTTPS, its self-signed certificate trusted via SWITCHBOARD_CA_BUNDLE) prints the verified notification,
all in under two minutes of wall time.

For speed the clone reuses this checkout's installed ``.venv`` (a symlink; its install stamp matches, so
``scripts/serve`` installs nothing) instead of the README's first-run install, which takes minutes here.
``PYTHONPATH`` puts the clone's own ``src`` first, so the code that runs is the clone's, and the test
checks that it is. Only the ports are chosen by the test: SWITCHBOARD_LISTEN and RECEIVER_PORT, both of
which the README's lines read with their defaults."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
WALL_SECONDS = 120


def quick_start(readme: str) -> str:
    section = readme.split("## Five minutes to a working queue", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block, "README.md has no ```sh block under 'Five minutes to a working queue'"
    return block.group(1)


def test_the_readme_quick_start_from_a_fresh_clone(tmp_path: Path) -> None:
    for tool in ("git", "jq", "curl", "openssl", "bash"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    venv = ROOT / ".venv"
    if not (venv / "bin" / "switchboard").exists():
        pytest.skip("no installed .venv in this checkout (scripts/test creates it)")
    started = time.monotonic()
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=60)
    (clone / ".venv").symlink_to(venv)
    script = quick_start((clone / "README.md").read_text())
    assert "switchboard call create_notify_hook" in script and "switchboard listen" in script

    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(
        SWITCHBOARD_LISTEN=f"127.0.0.1:{free_port()}",
        RECEIVER_PORT=str(free_port()),
        PYTHONPATH=str(clone / "src"),
        WAIT_SECONDS="90",
    )
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import switchboard; print(switchboard.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip().startswith(str(clone / "src")), where.stdout

    stderr = (tmp_path / "readme.log").open("wb")
    run = subprocess.Popen(
        ["bash", "-e", "-c", script],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,  # serve and listen run in the background: stop the whole group at the end
    )
    printed: list[str] = []
    notification: dict[str, object] | None = None
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:  # a blocking pipe read, bounded below by the queue's timeout
        assert run.stdout is not None
        for line in run.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        while notification is None:
            remaining = WALL_SECONDS - (time.monotonic() - started)
            try:
                line = lines.get(timeout=max(0.1, remaining))
            except queue.Empty:
                break  # over the wall-time bound: reported below
            if line is None:
                break  # every writer is gone and nothing verified
            printed.append(line)
            if line.startswith('{"webhook-id"'):
                notification = json.loads(line)
    finally:
        with contextlib.suppress(ProcessLookupError):  # everything in it may have ended already
            os.killpg(run.pid, signal.SIGTERM)
        run.wait(timeout=30)
        stderr.close()
    elapsed = time.monotonic() - started
    log = (tmp_path / "readme.log").read_text(errors="replace")
    assert notification is not None, "".join(printed) + "\n--- stderr ---\n" + log[-4000:]
    assert elapsed < WALL_SECONDS, f"{elapsed:.0f} s"

    out = "".join(printed)
    assert "created human you@example.com" in out and "created route" in out
    assert '"todos"' in out  # the curl line: the push was accepted as a todo (202)
    payload = notification["payload"]
    assert isinstance(payload, dict)
    assert payload["type"] == "todo.ready" and payload["queue"] == "inbox", payload
    assert payload["endpoint"] == "my-agent" and payload["source"] == "forge" and payload["kind"] == "push"
    assert "switchboard is ready at" in log
    # Nothing printed a secret twice: the hook secret appears nowhere in the output.
    assert not re.search(r"whsec_[A-Za-z0-9+/=]{20,}", out + log)
