"""switchboard.process.quickexit: a process that leaves without teardown still hands over its output and status."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = f"from switchboard.process.quickexit import leave\n{body}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3)])
def test_buffered_output_is_flushed_and_the_status_kept(code: int | None, status: int) -> None:
    done = _run(f"import sys, logging\nprint('out', end='')\nsys.stderr.write('err')\nleave({code!r})")
    assert (done.returncode, done.stdout, done.stderr) == (status, "out", "err")


def test_a_message_is_printed_and_exits_1_like_system_exit() -> None:
    done = _run("leave('refused: bad flag')")
    assert done.returncode == 1 and done.stderr.strip() == "refused: bad flag"


def test_the_console_script_keeps_argparse_status() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "switchboard.entry", "no-such-command"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "invalid choice" in done.stderr
