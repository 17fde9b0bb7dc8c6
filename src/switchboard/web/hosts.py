"""The web UI answers only under the name it is published as (docs/self-hosting.md, "Host check").

With ``SWITCHBOARD_PUBLIC_URL`` set, a page request whose ``Host`` names another host is refused before
any session or form is read: a DNS-rebinding page (an attacker's name pointed at this server) then
cannot drive the UI from the browser. Loopback names (``localhost``, 127.0.0.0/8, ``::1``) stay
allowed, so the operator's own ``curl`` and a reverse proxy that rewrites ``Host`` to the upstream
address keep working; a rebinding attack needs a name of its own, which is neither. ``/in``, ``/mcp``
and ``/a2a`` are not checked: forges and agents call them by whatever name the operator gave them.
Without a public URL there is no name to compare with, and nothing is checked.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _split(netloc: str, scheme: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(f"//{netloc}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host or parts.username is not None or parts.password is not None:
        return None
    return host.rstrip(".").lower(), port if port is not None else _DEFAULT_PORTS.get(scheme, 80)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HostCheck:
    """``allows(host_header)``: whether a page request may be answered."""

    def __init__(self, public_url: str | None) -> None:
        self._want: tuple[str, int] | None = None
        self._scheme = "http"
        if public_url:
            url = urlsplit(public_url)
            self._scheme = url.scheme or "http"
            self._want = _split(url.netloc, self._scheme)

    def allows(self, host_header: str | None) -> bool:
        if self._want is None:
            return True
        got = _split(host_header or "", self._scheme)
        if got is None:
            return False
        return got == self._want or _loopback(got[0])


__all__ = ["HostCheck"]
