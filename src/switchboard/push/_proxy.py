"""The egress proxy (``SWITCHBOARD_OUTBOUND_PROXY``): an HTTP CONNECT tunnel to a validated address.

Operators who must publish static outbound IPs route every outbound call through their own proxy. The
SSRF guard is unchanged: the target is validated (resolved once, every address judged) before anything
is dialled, and the tunnel is asked for by IP literal (``CONNECT 203.0.113.5:443``), so the proxy never
gets a host name it could resolve differently. TLS then runs inside the tunnel against the URL's host
name, exactly as on a direct connection (docs/push.md, "Egress proxy").

The proxy's own address is the operator's, not a tenant's: it is not judged by the guard, and it must
be an IP literal (no lookup at start-up or later), so nothing here resolves a name either.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote, urlsplit

import h11

#: The most a proxy's answer to CONNECT may take (the same bound as a receiver's response head).
MAX_PROXY_HEAD = 100 * 1024
FORMS = "http://IP:PORT or http://USER:PASSWORD@IP:PORT (IPv6: http://[IP]:PORT)"


@dataclass(frozen=True)
class OutboundProxy:
    """Where tunnels are opened, and the ``Proxy-Authorization`` value (Basic) when the URL carried
    userinfo. ``authorization`` is kept out of ``repr``: it is a credential."""

    ip: str
    port: int
    authorization: bytes | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """``ip:port`` (IPv6 in brackets), for the operator's log; never the credentials."""
        return authority(self.ip, self.port)


class ProxyError(OSError):
    """The tunnel could not be opened: ``proxy_unreachable`` (no TCP connection to the proxy),
    ``proxy_refused`` (it answered CONNECT with a non-2xx ``status``) or ``proxy_protocol`` (its answer
    was not HTTP/1.1, it hung up before answering, or it sent bytes beyond its answer). An ``OSError``,
    so a dial treats it as a connect failure of that address."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class _Wire(Protocol):
    async def read(self) -> bytes: ...
    async def write(self, data: bytes) -> None: ...


def authority(ip: str, port: int) -> str:
    """The authority-form of a CONNECT target: ``203.0.113.5:443`` or ``[2001:db8::1]:443`` (a zone,
    as in ``fe80::1%eth0``, is written ``%25``, RFC 6874)."""
    if ":" in ip:
        return f"[{ip.replace('%', '%25')}]:{port}"
    return f"{ip}:{port}"


def parse_proxy_url(url: str) -> OutboundProxy:
    """``http://[USER:PASSWORD@]IP:PORT`` as an :class:`OutboundProxy`. Raises ``ValueError`` whose
    message never repeats the URL (it may hold a password)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ValueError(f"not a URL (accepted: {FORMS})") from None
    if parts.scheme != "http":
        raise ValueError(f"the scheme must be http (the proxy is spoken to in plain HTTP; accepted: {FORMS})")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"no path, query or fragment (accepted: {FORMS})")
    host = parts.hostname or ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"the proxy must be named by its IP address, not a host name (accepted: {FORMS})"
        ) from None
    if port is None or port == 0:
        raise ValueError(f"the port is required (accepted: {FORMS})")
    authorization = None
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}".encode()
        authorization = b"Basic " + base64.b64encode(pair)
    return OutboundProxy(str(ip), port, authorization)


async def open_tunnel(wire: _Wire, proxy: OutboundProxy, ip: str, port: int) -> None:
    """Ask the proxy, on ``wire`` (a fresh connection to it), for a tunnel to ``ip``:``port``; returns
    once it answered 2xx, with nothing of the tunnel read yet. Raises :class:`ProxyError`, or what the
    wire raised (``OSError``)."""
    target = authority(ip, port).encode("ascii")
    headers = [(b"host", target)]
    if proxy.authorization is not None:
        headers.append((b"proxy-authorization", proxy.authorization))
    h = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_PROXY_HEAD)
    out = h.send(h11.Request(method=b"CONNECT", target=target, headers=headers)) or b""
    out += h.send(h11.EndOfMessage()) or b""
    await wire.write(out)
    response = await _answer(h, wire.read)
    if not 200 <= response.status_code < 300:
        raise ProxyError("proxy_refused", response.status_code)
    if h.trailing_data[0]:  # the far end speaks second (TLS, HTTP): nothing may precede our request
        raise ProxyError("proxy_protocol")


async def _answer(h: h11.Connection, read: Callable[[], Awaitable[bytes]]) -> h11.Response:
    """The proxy's final answer to CONNECT (1xx skipped)."""
    while True:
        try:
            event = h.next_event()
        except h11.RemoteProtocolError:
            raise ProxyError("proxy_protocol") from None
        if event is h11.NEED_DATA:
            data = await read()
            if not data:
                raise ProxyError("proxy_protocol")  # hung up before answering
            h.receive_data(data)
            continue
        if isinstance(event, h11.Response):
            return event
        if not isinstance(event, h11.InformationalResponse):  # pragma: no cover - h11 yields nothing else
            raise ProxyError("proxy_protocol")
