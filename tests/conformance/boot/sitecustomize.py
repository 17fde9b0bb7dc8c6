"""Test-only interpreter start-up hook for the conformance suite's server processes.

The suite puts this folder on ``PYTHONPATH`` of every ``switchboard serve`` it starts; the notify worker
processes that server starts inherit the environment, so the same hook runs in them too. When
``SBCONF_HOSTS_FILE`` names a file, every DNS lookup of Switchboard's outbound guard is answered from it
through ``switchboard.push.install_resolver`` (a code-level seam: no setting reaches it). See
tests/conformance/README.md for why.

The file is JSON ``{"name": ["ip", ...]}`` and is read again on every lookup, so a test can rebind a name
between the create-time check (server process) and an attempt (worker process). A name not in it does
not resolve: no lookup ever leaves the process.
"""

from __future__ import annotations

import json
import os
import socket


def _install(path: str) -> None:
    from switchboard.push import install_resolver

    async def resolve(host: str, port: int) -> list[str]:
        with open(path, encoding="utf-8") as f:
            answers = json.load(f)
        found = answers.get(host.rstrip(".").lower())
        if not found:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [str(ip) for ip in found]

    install_resolver(resolve)


_hosts = os.environ.get("SBCONF_HOSTS_FILE")
if _hosts:
    _install(_hosts)


def _fail_signing(marker: bytes) -> None:
    """``SBCONF_SIGNER_FAILS``: the signer raises for any body containing the marker, so a test can
    inject a failure between building an attempt and sending it (REQ-12)."""
    import switchboard.push as push
    from switchboard.push import _signer

    real = _signer.standard_headers

    def standard_headers(secrets: object, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        if marker in body:
            raise RuntimeError("injected signer failure (tests/conformance)")
        return real(secrets, msg_id, timestamp, body)  # type: ignore[arg-type]

    push.standard_headers = standard_headers  # type: ignore[assignment]
    _signer.standard_headers = standard_headers  # type: ignore[assignment]


_marker = os.environ.get("SBCONF_SIGNER_FAILS")
if _marker:
    _fail_signing(_marker.encode())
