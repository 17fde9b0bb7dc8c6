"""``serve`` raises its soft open-file limit to what ``SWITCHBOARD_MAX_CONNECTIONS`` needs (twice the cap
for a burst's sweep, plus spare: switchboard/edge/fdlimit.py), and says so once when the hard limit is too low;
on the real process, started with lowered limits through ``prlimit``."""

from __future__ import annotations

import json
import resource
import shutil
from pathlib import Path

import pytest

from switchboard.core.verbs import DEFAULT_GRANT
from switchboard.edge.fdlimit import needed_for
from tests.reliability.procs import ServerProcess, provision, server_env, servers

WARNING = "the open-file limit is below what SWITCHBOARD_MAX_CONNECTIONS needs"

pytestmark = pytest.mark.skipif(shutil.which("prlimit") is None, reason="util-linux prlimit not installed")


def nofile(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-file line in /proc/<pid>/limits")


def warnings(server: ServerProcess) -> list[dict[str, object]]:
    lines = server.log_path.read_text(errors="replace").splitlines()
    return [json.loads(line) for line in lines if WARNING in line]


async def test_serve_raises_a_low_soft_limit_and_warns_when_the_hard_limit_is_too_low(tmp_path: Path) -> None:
    cap = 500
    needed = needed_for(cap)
    env = server_env(max_connections=cap)
    data = tmp_path / "data"
    await provision(env, data, slug="alice", verbs=DEFAULT_GRANT)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # ours; lowering it needs no privilege
    assert hard == resource.RLIM_INFINITY or hard > needed
    ceiling = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    roomy = ServerProcess(data, env, name="roomy", wrapper=["prlimit", f"--nofile=256:{ceiling}", "--"])
    with servers(roomy):
        roomy.start()
        await roomy.ready()
        assert nofile(roomy.pid)[0] == needed  # soft raised to what the cap needs, hard untouched
        assert warnings(roomy) == []
    tight = ServerProcess(data, env, name="tight", wrapper=["prlimit", f"--nofile=256:{needed - 100}", "--"])
    with servers(tight):
        tight.start()
        await tight.ready()  # it still serves
        assert nofile(tight.pid) == (needed - 100, needed - 100)  # as far as the hard limit allows
        [line] = warnings(tight)
        assert (line["limit"], line["needed"], line["max_connections"]) == (needed - 100, needed, cap)
