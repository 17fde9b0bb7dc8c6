"""The egress proxy's parts: SWITCHBOARD_OUTBOUND_PROXY's form (checked at start-up, never echoed), the
CONNECT request it sends and how it reads the proxy's answer (on a scripted in-memory wire)."""

from __future__ import annotations

import base64

import pytest

from switchboard.process.preflight import ConfigError, load_settings
from switchboard.push import OutboundProxy, parse_proxy_url
from switchboard.push._proxy import ProxyError, authority, open_tunnel
from switchboard.settings import Settings

SECRET = "s3cret-proxy-pass"


class ScriptedWire:
    """What a proxy answers, in chunks; records what was written."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)
        self.written = b""

    async def read(self) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    async def write(self, data: bytes) -> None:
        self.written += data


@pytest.mark.parametrize(
    ("url", "ip", "port"),
    [
        ("http://127.0.0.1:3128", "127.0.0.1", 3128),
        ("http://10.1.2.3:8080/", "10.1.2.3", 8080),
        ("http://[::1]:3128", "::1", 3128),
        ("  http://[2001:DB8::1]:1  ", "2001:db8::1", 1),
    ],
)
def test_accepted_forms(url: str, ip: str, port: int) -> None:
    assert parse_proxy_url(url) == OutboundProxy(ip, port)


def test_userinfo_becomes_basic_proxy_authorization_and_stays_out_of_repr() -> None:
    proxy = parse_proxy_url(f"http://egress%40corp:{SECRET}%3A1@192.0.2.10:3128")
    assert proxy.authorization == b"Basic " + base64.b64encode(f"egress@corp:{SECRET}:1".encode())
    assert SECRET not in repr(proxy) and "authorization" not in repr(proxy)
    assert proxy.address == "192.0.2.10:3128"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (f"https://u:{SECRET}@127.0.0.1:3128", "scheme must be http"),
        (f"socks5://u:{SECRET}@127.0.0.1:1080", "scheme must be http"),
        (f"http://u:{SECRET}@proxy.internal:3128", "by its IP address"),
        (f"http://u:{SECRET}@127.1:3128", "by its IP address"),
        (f"http://u:{SECRET}@127.0.0.1", "port is required"),
        (f"http://u:{SECRET}@127.0.0.1:0", "port is required"),
        (f"http://u:{SECRET}@127.0.0.1:70000", "not a URL"),
        (f"http://u:{SECRET}@127.0.0.1:3128/path", "no path"),
        (f"http://u:{SECRET}@127.0.0.1:3128?x=1", "no path"),
    ],
)
def test_refused_forms_say_why_without_the_url(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as info:
        parse_proxy_url(url)
    assert SECRET not in str(info.value)


def test_a_bad_setting_is_a_start_up_error_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_OUTBOUND_PROXY", f"http://u:{SECRET}@proxy.internal:3128")
    with pytest.raises(ConfigError) as info:
        load_settings({})
    assert info.value.message.startswith("invalid configuration: SWITCHBOARD_OUTBOUND_PROXY: ")
    assert "IP address" in info.value.message and SECRET not in info.value.message


def test_unset_or_empty_is_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().outbound_proxy is None
    monkeypatch.setenv("SWITCHBOARD_OUTBOUND_PROXY", "")
    assert Settings().outbound_proxy is None
    monkeypatch.setenv("SWITCHBOARD_OUTBOUND_PROXY", "http://127.0.0.1:3128")
    assert Settings().outbound_proxy == "http://127.0.0.1:3128"


def test_connect_authority_forms() -> None:
    assert authority("203.0.113.5", 443) == "203.0.113.5:443"
    assert authority("2001:db8::1", 443) == "[2001:db8::1]:443"
    assert authority("fe80::1%eth0", 8443) == "[fe80::1%25eth0]:8443"


async def test_the_connect_request_names_the_ip_and_carries_the_credential() -> None:
    wire = ScriptedWire(b"HTTP/1.1 200 Connection established\r\n\r\n")
    proxy = parse_proxy_url(f"http://u:{SECRET}@127.0.0.1:3128")
    await open_tunnel(wire, proxy, "203.0.113.5", 443)
    assert wire.written.split(b"\r\n") == [
        b"CONNECT 203.0.113.5:443 HTTP/1.1",
        b"host: 203.0.113.5:443",
        b"proxy-authorization: " + (proxy.authorization or b""),
        b"",
        b"",
    ]


async def test_without_userinfo_no_proxy_authorization_is_sent() -> None:
    wire = ScriptedWire(b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.0 200 OK\r\n", b"\r\n")
    await open_tunnel(wire, OutboundProxy("127.0.0.1", 3128), "2001:db8::1", 8443)
    assert wire.written == b"CONNECT [2001:db8::1]:8443 HTTP/1.1\r\nhost: [2001:db8::1]:8443\r\n\r\n"


@pytest.mark.parametrize(
    ("answer", "reason", "status"),
    [
        (b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n", "proxy_refused", 407),
        (b"HTTP/1.1 403 Forbidden\r\n\r\n", "proxy_refused", 403),
        (b"HTTP/1.1 301 Moved\r\nLocation: http://elsewhere/\r\n\r\n", "proxy_refused", 301),
        (b"HTTP/1.1 200 OK\r\n\r\n\x16\x03\x01", "proxy_protocol", None),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "proxy_protocol", None),
        (b"", "proxy_protocol", None),
    ],
)
async def test_what_a_proxy_answer_means(answer: bytes, reason: str, status: int | None) -> None:
    with pytest.raises(ProxyError) as info:
        await open_tunnel(ScriptedWire(answer), OutboundProxy("127.0.0.1", 3128), "203.0.113.5", 443)
    assert (info.value.reason, info.value.status) == (reason, status)
    assert isinstance(info.value, OSError)
