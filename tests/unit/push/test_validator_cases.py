"""The SSRF guard, table-driven: URL shapes, bypass encodings, every address class, every
REQ-3 allowlist and self rule, and rebinding, against an injected resolver.

Each case says what the resolver answers (``dns``); a case without ``dns`` must be
decided without any lookup (an IP literal, or a URL refused before resolution).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from switchboard.push import TargetRejected, ValidatedTarget, Validator

PUBLIC = "93.184.215.14"
PUBLIC6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"


def teredo(server: str, client: str) -> str:
    """A Teredo address (RFC 4380): 2001:0:<server>:<flags>:<port>:<client XOR 1s>."""
    s = int(ipaddress.IPv4Address(server))
    c = int(ipaddress.IPv4Address(client)) ^ 0xFFFFFFFF
    value = (0x20010000 << 96) | (s << 64) | (0x8000 << 48) | (0x63BF << 32) | c
    return str(ipaddress.IPv6Address(value))


def sixtofour(v4: str) -> str:
    return str(ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(v4)) << 80) | 1))


@dataclass(frozen=True)
class Case:
    id: str
    url: str
    expect: str  # "ok" or the TargetRejected reason
    dns: Sequence[str] | None = None
    allow: Sequence[str] = ()
    listen: Sequence[tuple[str, int]] = ()
    allow_http: bool = False
    target: dict[str, object] = field(default_factory=dict)  # expected ValidatedTarget fields


def ok(id: str, url: str, dns: Sequence[str] | None = None, **kw: object) -> Case:
    target = {k: kw.pop(k) for k in ("host", "port", "path", "ips", "scheme") if k in kw}
    return Case(id, url, "ok", dns, target=target, **kw)  # type: ignore[arg-type]


def rej(id: str, url: str, reason: str, dns: Sequence[str] | None = None, **kw: object) -> Case:
    return Case(id, url, reason, dns, **kw)  # type: ignore[arg-type]


LONG = "https://example.com/" + "a" * (2048 - len("https://example.com/"))

CASES: list[Case] = [
    # --- scheme, userinfo, length, characters ----------------------------------------
    ok(
        "https",
        "https://example.com/hook",
        [PUBLIC],
        host="example.com",
        port=443,
        path="/hook",
        ips=(PUBLIC,),
    ),
    ok("scheme-case", "HTTPS://Example.COM/X", [PUBLIC], scheme="https", host="example.com", path="/X"),
    rej("http-without-opt-in", "http://example.com/", "scheme"),
    ok("http-with-opt-in", "http://example.com/", [PUBLIC], allow_http=True, scheme="http", port=80),
    rej("ftp", "ftp://example.com/", "scheme"),
    rej("javascript", "javascript:alert(1)", "scheme"),
    rej("file", "file:///etc/passwd", "scheme"),
    rej("scheme-relative", "//example.com/", "scheme"),
    rej("userinfo-user-pass", "https://user:pass@example.com/", "userinfo"),
    rej("userinfo-user", "https://user@example.com/", "userinfo"),
    rej("userinfo-empty", "https://@example.com/", "userinfo"),
    rej("userinfo-host-confusion", "https://example.com@127.0.0.1/", "userinfo"),
    rej("userinfo-colon-confusion", "https://example.com:443@10.0.0.1/", "userinfo"),
    ok("exactly-2048-bytes", LONG, [PUBLIC]),
    rej("2049-bytes", LONG + "a", "too_long"),
    rej("bytes-not-chars", "https://example.com/" + "é" * 1020, "too_long"),
    rej("space-in-host", "https://exa mple.com/", "malformed"),
    rej("nul", "https://example.com/\x00", "malformed"),
    rej("tab-in-host", "https://exam\tple.com/", "malformed"),
    rej("newline", "https://example.com/\n", "malformed"),
    rej("leading-space", " https://example.com/", "malformed"),
    rej("c1-control", "https://example.com/\x85", "malformed"),
    rej("backslash-host-confusion", "https://example.com\\@127.0.0.1/", "malformed"),
    rej("no-host", "https://", "malformed"),
    rej("empty-authority", "https:///path", "malformed"),
    rej("opaque", "https:example.com", "malformed"),
    # --- ports -----------------------------------------------------------------------
    ok("explicit-port", "https://example.com:8443/x?y=1#frag", [PUBLIC], port=8443, path="/x?y=1"),
    ok("default-port-explicit", "https://example.com:443/", [PUBLIC], port=443),
    rej("port-zero", "https://example.com:0/", "malformed"),
    rej("port-too-big", "https://example.com:65536/", "malformed"),
    rej("port-letters", "https://example.com:abc/", "malformed"),
    rej("port-empty", "https://example.com:/", "malformed"),
    rej("port-plus", "https://example.com:+443/", "malformed"),
    rej("port-arabic-digits", "https://example.com:٤٤٣/", "malformed"),
    rej("port-twice", "https://example.com:443:443/", "malformed"),
    # --- path and query as sent ----------------------------------------------------------
    ok("no-path", "https://example.com", [PUBLIC], path="/"),
    ok("query-only", "https://example.com?q=1", [PUBLIC], path="/?q=1"),
    ok("fragment-dropped", "https://example.com/a#b?c", [PUBLIC], path="/a"),
    ok("non-ascii-path-encoded", "https://example.com/é?ü=1", [PUBLIC], path="/%C3%A9?%C3%BC=1"),
    # --- host shapes ---------------------------------------------------------------------
    rej("percent-encoded-ip", "https://%31%32%37.0.0.1/", "malformed"),
    rej("percent-encoded-name", "https://exa%6dple.com/", "malformed"),
    rej("unclosed-bracket", "https://[::1/", "malformed"),
    rej("bare-ipv6", "https://::1/", "malformed"),
    rej("ipv4-in-brackets", "https://[127.0.0.1]/", "malformed"),
    rej("ipvfuture", "https://[v1.foo]/", "malformed"),
    rej("zone-not-percent-25", "https://[fe80::1%eth0]/", "malformed"),
    rej("empty-label", "https://example..com/", "malformed"),
    rej("two-trailing-dots", "https://example.com../", "malformed"),
    rej("label-too-long", "https://" + "a" * 64 + ".com/", "malformed"),
    rej("name-too-long", "https://" + "a." * 127 + "com/", "malformed"),
    rej("bang-in-host", "https://exa!mple.com/", "malformed"),
    rej("nfkc-hash-in-host", "https://evil.com\uff03@good.com/", "malformed"),
    rej("nfkc-slash-in-host", "https://example.com\u2100x/", "malformed"),
    ok("trailing-dot", "https://EXAMPLE.COM./", [PUBLIC], host="example.com"),
    ok("idn", "https://bücher.example/", [PUBLIC], host="xn--bcher-kva.example"),
    ok("idn-upper", "https://BÜCHER.example/", [PUBLIC], host="xn--bcher-kva.example"),
    ok("ideographic-trailing-dot", "https://example.com\u3002/", [PUBLIC], host="example.com"),
    ok("soft-hyphen-ignored", "https://ex\u00adample.com/", [PUBLIC], host="example.com"),
    ok("underscore", "https://my_hook.example.com/", [PUBLIC], host="my_hook.example.com"),
    rej("ends-in-number-not-ip", "https://example.123/", "malformed"),
    # --- IPv4 literals in every inet_aton form: never resolved -------------------------
    rej("dotted-loopback", "https://127.0.0.1/", "loopback"),
    rej("dword", "https://2130706433/", "loopback"),
    rej("octal", "https://0177.0.0.1/", "loopback"),
    rej("short-form", "https://127.1/", "loopback"),
    rej("hex-short", "https://0x7f.1/", "loopback"),
    rej("hex-dword", "https://0x7f000001/", "loopback"),
    rej("octal-dword", "https://017700000001/", "loopback"),
    rej("hex-upper", "https://0X7F.0.0.1/", "loopback"),
    rej("literal-trailing-dot", "https://127.0.0.1./", "loopback"),
    rej("fullwidth-digits", "https://１２７.０.０.１/", "loopback"),
    rej("ideographic-dots", "https://127。0。0。1/", "loopback"),
    rej("zero", "https://0/", "unspecified"),
    rej("zeros", "https://0.0.0.0/", "unspecified"),
    rej("octet-out-of-range", "https://1.2.3.999/", "malformed"),
    rej("bad-octal", "https://08.0.0.1/", "malformed"),
    rej("dword-out-of-range", "https://4294967296/", "malformed"),
    rej("five-parts", "https://1.2.3.4.5/", "malformed"),
    rej("private-literal", "https://10.0.0.5/", "private"),
    rej("private-hex", "https://0xa.0.0.5/", "private"),
    rej("private-dword", "https://167772165/", "private"),
    rej("metadata-literal", "https://169.254.169.254/latest/meta-data/", "link_local"),
    rej("metadata-dword", "https://2852039166/", "link_local"),
    ok("public-literal", "https://8.8.8.8/", host="8.8.8.8", ips=("8.8.8.8",)),
    ok("public-dword", "https://134744072/", host="8.8.8.8", ips=("8.8.8.8",)),
    # --- IPv6 literals --------------------------------------------------------------------
    rej("v6-loopback", "https://[::1]/", "loopback"),
    rej("v6-loopback-long", "https://[0:0:0:0:0:0:0:1]/", "loopback"),
    rej("v6-unspecified", "https://[::]/", "unspecified"),
    rej("mapped-loopback-dotted", "https://[::ffff:127.0.0.1]/", "loopback"),
    rej("mapped-loopback-hex", "https://[::ffff:7f00:1]/", "loopback"),
    rej("mapped-private", "https://[::ffff:10.0.0.5]/", "private"),
    rej("mapped-cgnat", "https://[::ffff:100.64.0.1]/", "cgnat"),
    rej("nat64-loopback", "https://[64:ff9b::7f00:1]/", "loopback"),
    rej("nat64-metadata", "https://[64:ff9b::a9fe:a9fe]/", "link_local"),
    rej("6to4-loopback", f"https://[{sixtofour('127.0.0.1')}]/", "loopback"),
    rej("6to4-private", f"https://[{sixtofour('10.0.0.5')}]/", "private"),
    rej("teredo-loopback-client", f"https://[{teredo('65.54.227.120', '127.0.0.1')}]/", "loopback"),
    rej("teredo-private-server", f"https://[{teredo('10.1.1.1', '8.8.8.8')}]/", "private"),
    ok("teredo-public", f"https://[{teredo('65.54.227.120', '8.8.8.8')}]/"),
    ok("nat64-public", "https://[64:ff9b::808:808]/", ips=("64:ff9b::808:808",)),
    ok("6to4-public", f"https://[{sixtofour('8.8.8.8')}]/"),
    ok("mapped-public-dials-v4", "https://[::ffff:8.8.8.8]/", ips=("8.8.8.8",)),
    rej("v6-link-local", "https://[fe80::1]/", "link_local"),
    rej("v6-link-local-zone", "https://[fe80::1%25eth0]/", "link_local"),
    rej("v6-loopback-zone", "https://[::1%25lo]/", "loopback"),
    rej("ula", "https://[fc00::1]/", "unique_local"),
    rej("ula-fd", "https://[fd12:3456::1]/", "unique_local"),
    rej("aws-metadata-v6", "https://[fd00:ec2::254]/", "metadata"),
    rej("v6-multicast", "https://[ff02::1]/", "multicast"),
    rej("v6-documentation", "https://[2001:db8::1]/", "reserved"),
    rej("v6-documentation-9637", "https://[3fff::1]/", "reserved"),
    rej("site-local", "https://[fec0::1]/", "reserved"),
    rej("discard-only", "https://[100::1]/", "reserved"),
    rej("ipv4-compatible", "https://[::127.0.0.1]/", "reserved"),
    rej("nat64-local-use", "https://[64:ff9b:1::1]/", "reserved"),
    rej("ietf-protocol", "https://[2001:2::1]/", "reserved"),
    rej("srv6-outside-2000", "https://[5f00::1]/", "reserved"),
    ok("v6-public", "https://[2606:4700:4700::1111]:8443/", host="2606:4700:4700::1111", port=8443),
    # --- every IPv4 address class, via the resolver ------------------------------------
    rej("dns-rfc1918-10", "https://h.example/", "private", ["10.1.2.3"]),
    rej("dns-rfc1918-172", "https://h.example/", "private", ["172.31.255.255"]),
    ok("dns-172-32-public", "https://h.example/", ["172.32.0.1"]),
    rej("dns-rfc1918-192", "https://h.example/", "private", ["192.168.1.1"]),
    rej("dns-cgnat-low", "https://h.example/", "cgnat", ["100.64.0.1"]),
    rej("dns-cgnat-high", "https://h.example/", "cgnat", ["100.127.255.255"]),
    ok("dns-after-cgnat", "https://h.example/", ["100.128.0.1"]),
    rej("dns-alibaba-metadata", "https://h.example/", "metadata", ["100.100.100.200"]),
    rej("dns-imds", "https://h.example/", "link_local", ["169.254.169.254"]),
    rej("dns-link-local", "https://h.example/", "link_local", ["169.254.1.1"]),
    rej("dns-loopback", "https://localhost/", "loopback", ["127.0.0.1"]),
    rej("dns-loopback-other", "https://h.example/", "loopback", ["127.255.255.254"]),
    rej("dns-multicast", "https://h.example/", "multicast", ["224.0.0.1"]),
    rej("dns-ssdp", "https://h.example/", "multicast", ["239.255.255.250"]),
    rej("dns-broadcast", "https://h.example/", "reserved", ["255.255.255.255"]),
    rej("dns-class-e", "https://h.example/", "reserved", ["240.0.0.1"]),
    rej("dns-this-network", "https://h.example/", "reserved", ["0.1.2.3"]),
    rej("dns-unspecified", "https://h.example/", "unspecified", ["0.0.0.0"]),
    rej("dns-ietf-192-0-0", "https://h.example/", "reserved", ["192.0.0.8"]),
    rej("dns-ietf-192-0-0-192", "https://h.example/", "reserved", ["192.0.0.192"]),
    rej("dns-test-net-1", "https://h.example/", "reserved", ["192.0.2.1"]),
    rej("dns-test-net-2", "https://h.example/", "reserved", ["198.51.100.1"]),
    rej("dns-test-net-3", "https://h.example/", "reserved", ["203.0.113.1"]),
    rej("dns-benchmark", "https://h.example/", "reserved", ["198.19.255.255"]),
    rej("dns-6to4-relay", "https://h.example/", "reserved", ["192.88.99.1"]),
    rej("dns-mapped-answer", "https://h.example/", "private", ["::ffff:10.0.0.1"]),
    rej("dns-v6-loopback", "https://h.example/", "loopback", ["::1"]),
    ok("dns-public", "https://h.example/", ["8.8.8.8", "1.1.1.1"], ips=("8.8.8.8", "1.1.1.1")),
    ok("dns-public-v6", "https://h.example/", [PUBLIC6, PUBLIC], ips=(PUBLIC6, PUBLIC)),
    ok("dns-dedup", "https://h.example/", [PUBLIC, PUBLIC, "::ffff:" + PUBLIC], ips=(PUBLIC,)),
    # --- any refused address refuses the target ----------------------------------------
    rej("any-private", "https://h.example/", "private", [PUBLIC, "10.0.0.1"]),
    rej("any-loopback-v6", "https://h.example/", "loopback", [PUBLIC, "::1"]),
    rej("any-metadata-last", "https://h.example/", "link_local", [PUBLIC, PUBLIC6, "169.254.169.254"]),
    rej(
        "allowlisted-plus-private",
        "https://h.example/",
        "private",
        ["192.168.1.1", "10.0.0.1"],
        allow=["192.168.0.0/16"],
    ),
    # --- allowlist: private, unique-local and CGNAT by any covering entry ----------------
    ok("allow-private", "https://h.example/", ["10.0.0.5"], allow=["10.0.0.0/8"]),
    rej("allow-private-other-range", "https://h.example/", "private", ["10.0.1.5"], allow=["10.0.0.0/24"]),
    ok("allow-everything-opens-private", "https://h.example/", ["10.0.0.5"], allow=["0.0.0.0/0"]),
    ok("allow-everything-opens-cgnat", "https://h.example/", ["100.64.0.1"], allow=["0.0.0.0/0"]),
    ok("allow-ula", "https://h.example/", ["fd00::1"], allow=["fc00::/7"]),
    ok("allow-v6-everything-opens-ula", "https://h.example/", ["fc00::1"], allow=["::/0"]),
    ok("allow-mapped-answer", "https://h.example/", ["::ffff:10.0.0.5"], allow=["10.0.0.0/8"]),
    ok("allow-6to4-by-inner-v4", f"https://[{sixtofour('10.0.0.5')}]/", allow=["10.0.0.0/8"]),
    ok("allow-mapped-entry", "https://h.example/", ["10.0.0.5"], allow=["::ffff:10.0.0.0/104"]),
    rej("allow-v6-does-not-open-v4", "https://h.example/", "private", ["10.0.0.5"], allow=["::/0"]),
    # --- allowlist: loopback and link-local only by an entry wholly inside them ----------
    ok("allow-loopback-exact", "https://h.example/", ["127.0.0.1"], allow=["127.0.0.1/32"]),
    rej(
        "allow-loopback-exact-other", "https://h.example/", "loopback", ["127.0.0.2"], allow=["127.0.0.1/32"]
    ),
    ok("allow-loopback-whole", "https://h.example/", ["127.5.5.5"], allow=["127.0.0.0/8"]),
    rej("allow-loopback-too-broad", "https://h.example/", "loopback", ["127.0.0.1"], allow=["126.0.0.0/7"]),
    rej(
        "allow-everything-not-loopback", "https://h.example/", "loopback", ["127.0.0.1"], allow=["0.0.0.0/0"]
    ),
    rej(
        "allow-everything-not-imds",
        "https://h.example/",
        "link_local",
        ["169.254.169.254"],
        allow=["0.0.0.0/0"],
    ),
    ok("allow-v6-loopback", "https://[::1]/", allow=["::1/128"]),
    rej("allow-v6-everything-not-loopback", "https://[::1]/", "loopback", allow=["::/0"]),
    rej("allow-v6-everything-not-link-local", "https://[fe80::1]/", "link_local", allow=["::/0"]),
    ok("allow-link-local-range", "https://h.example/", ["169.254.169.254"], allow=["169.254.0.0/16"]),
    ok("allow-imds-exact", "https://h.example/", ["169.254.169.254"], allow=["169.254.169.254/32"]),
    rej(
        "allow-link-local-too-broad",
        "https://h.example/",
        "link_local",
        ["169.254.1.1"],
        allow=["169.254.0.0/15"],
    ),
    ok("allow-v6-link-local", "https://[fe80::1%25eth0]/", allow=["fe80::/10"], ips=("fe80::1%eth0",)),
    rej("allow-v6-link-local-too-broad", "https://[fe80::1]/", "link_local", allow=["fe80::/9"]),
    # --- allowlist: metadata only by an entry for exactly that address -------------------
    rej(
        "covering-cgnat-not-metadata",
        "https://h.example/",
        "metadata",
        ["100.100.100.200"],
        allow=["100.64.0.0/10", "fc00::/7"],
    ),
    rej(
        "covering-ula-not-metadata",
        "https://[fd00:ec2::254]/",
        "metadata",
        allow=["100.64.0.0/10", "fc00::/7"],
    ),
    ok(
        "covering-cgnat-opens-neighbour",
        "https://h.example/",
        ["100.100.100.201"],
        allow=["100.64.0.0/10", "fc00::/7"],
    ),
    rej(
        "metadata-slash-24", "https://h.example/", "metadata", ["100.100.100.200"], allow=["100.100.100.0/24"]
    ),
    rej("metadata-everything", "https://h.example/", "metadata", ["100.100.100.200"], allow=["0.0.0.0/0"]),
    ok("metadata-exact", "https://h.example/", ["100.100.100.200"], allow=["100.100.100.200/32"]),
    ok("metadata-v6-exact", "https://[fd00:ec2::254]/", allow=["fd00:ec2::254/128"]),
    # --- never exempted ------------------------------------------------------------------
    rej("allow-never-multicast", "https://h.example/", "multicast", ["224.0.0.1"], allow=["224.0.0.0/4"]),
    rej("allow-never-unspecified", "https://0.0.0.0/", "unspecified", allow=["0.0.0.0/0"]),
    rej("allow-never-reserved", "https://h.example/", "reserved", ["192.0.2.1"], allow=["192.0.2.0/24"]),
    # --- self: own listen address and port ------------------------------------------------
    ok("self-other-port", "https://127.0.0.1:9443/", allow=["127.0.0.1/32"], listen=[("127.0.0.1", 8080)]),
    rej(
        "self-listed", "https://127.0.0.1:8080/", "self", allow=["127.0.0.1/32"], listen=[("127.0.0.1", 8080)]
    ),
    rej("self-unlisted", "https://127.0.0.1:8080/", "self", listen=[("127.0.0.1", 8080)]),
    rej(
        "self-via-dns",
        "https://h.example:8080/",
        "self",
        ["127.0.0.1"],
        allow=["127.0.0.0/8"],
        listen=[("127.0.0.1", 8080)],
    ),
    rej(
        "self-mapped",
        "https://[::ffff:127.0.0.1]:8080/",
        "self",
        allow=["127.0.0.1/32"],
        listen=[("127.0.0.1", 8080)],
    ),
    rej("self-v6", "https://[::1]:8080/", "self", allow=["::1/128"], listen=[("::1", 8080)]),
    rej("self-public-listen", "https://h.example/", "self", ["8.8.4.4"], listen=[("8.8.4.4", 443)]),
    ok("self-public-listen-other-port", "https://h.example:8443/", ["8.8.4.4"], listen=[("8.8.4.4", 443)]),
    rej(
        "self-wildcard-allowlisted",
        "https://h.example:8080/",
        "self",
        ["10.0.0.5"],
        allow=["10.0.0.0/8"],
        listen=[("0.0.0.0", 8080)],
    ),
    ok(
        "self-wildcard-other-port",
        "https://h.example:8081/",
        ["10.0.0.5"],
        allow=["10.0.0.0/8"],
        listen=[("0.0.0.0", 8080)],
    ),
    ok(
        "self-wildcard-public",
        "https://h.example:8080/",
        ["8.8.8.8"],
        allow=["10.0.0.0/8"],
        listen=[("0.0.0.0", 8080)],
    ),
    rej(
        "self-v6-wildcard",
        "https://h.example:8443/",
        "self",
        ["10.0.0.5"],
        allow=["10.0.0.0/8"],
        listen=[("::", 8443)],
    ),
    rej(
        "self-name-allowlisted",
        "https://h.example:8080/",
        "self",
        ["10.0.0.5"],
        allow=["10.0.0.0/8"],
        listen=[("switchboard.internal", 8080)],
    ),
    rej(
        "self-name-loopback",
        "https://127.0.0.1:8080/",
        "self",
        allow=["127.0.0.1/32"],
        listen=[("localhost", 8080)],
    ),
    ok(
        "self-name-other-port",
        "https://127.0.0.1:8081/",
        allow=["127.0.0.1/32"],
        listen=[("localhost", 8080)],
    ),
    ok(
        "self-name-public",
        "https://h.example:8080/",
        ["8.8.8.8"],
        allow=["0.0.0.0/0"],
        listen=[("localhost", 8080)],
    ),
    rej(
        "self-default-port",
        "https://h.example/",
        "self",
        ["10.0.0.5"],
        allow=["10.0.0.0/8"],
        listen=[("sb.example", 443)],
    ),
]


def test_table_is_large_and_unique() -> None:
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_case(case: Case) -> None:
    calls: list[tuple[str, int]] = []

    async def resolver(host: str, port: int) -> list[str]:
        calls.append((host, port))
        assert case.dns is not None, "this case must be decided without a lookup"
        return list(case.dns)

    validator = Validator(
        allow_http=case.allow_http, allow_cidrs=case.allow, listen_addresses=case.listen, resolver=resolver
    )
    if case.expect == "ok":
        target = await validator.check(case.url)
        assert isinstance(target, ValidatedTarget)
        for name, value in case.target.items():
            assert getattr(target, name) == value, name
        if case.dns is not None:
            assert calls == [(target.host, target.port)]
        assert target.ips
        for ip in target.ips:
            ipaddress.ip_address(ip)  # only IP strings are ever handed to the transport
    else:
        with pytest.raises(TargetRejected) as info:
            await validator.check(case.url)
        assert info.value.reason == case.expect
        assert case.expect in str(info.value)
        assert info.value.stage == "validate"
        assert info.value.result == "rejected_ssrf"
        assert not info.value.retryable
    if case.dns is None:
        assert calls == []


async def test_rebinding_is_caught_on_the_next_check() -> None:
    answers = [[PUBLIC], ["127.0.0.1"]]

    async def resolver(host: str, port: int) -> list[str]:
        return answers.pop(0)

    validator = Validator(resolver=resolver)
    first = await validator.check("https://rebind.example/hook")
    assert first.ips == (PUBLIC,)
    with pytest.raises(TargetRejected) as info:
        await validator.check("https://rebind.example/hook")
    assert info.value.reason == "loopback"
