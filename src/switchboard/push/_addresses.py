"""Address classes and the REQ-3 allowlist policy.

Explicit tables, not ``ipaddress.is_global``/``is_private``: those flags disagree
between CPython releases and miss CGNAT behind an IPv4-mapped address, 3fff::/20,
fec0::/10 and embedded loopback (see docs/push.md). Every table below cites the
registry it comes from. IPv6 addresses that carry an IPv4 address (mapped, NAT64,
6to4, Teredo) are judged by the IPv4 address inside them, so that no wrapper can
smuggle 127.0.0.1 past the IPv4 rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network


def _nets4(*cidrs: str) -> tuple[IPv4Network, ...]:
    return tuple(IPv4Network(c) for c in cidrs)


def _nets6(*cidrs: str) -> tuple[IPv6Network, ...]:
    return tuple(IPv6Network(c) for c in cidrs)


# --- IPv4 (RFC 6890 and the IANA IPv4 Special-Purpose Address Registry) -------------
LOOPBACK_V4 = IPv4Network("127.0.0.0/8")  # RFC 1122
LINK_LOCAL_V4 = IPv4Network("169.254.0.0/16")  # RFC 3927; holds 169.254.169.254 (IMDS)
PRIVATE_V4 = _nets4("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")  # RFC 1918
CGNAT_V4 = IPv4Network("100.64.0.0/10")  # RFC 6598 shared address space
MULTICAST_V4 = IPv4Network("224.0.0.0/4")  # RFC 5771
#: Not globally reachable per IANA, and never exempted by the allowlist.
RESERVED_V4 = _nets4(
    "0.0.0.0/8",  # "this network" (0.0.0.0 itself is reported as unspecified)
    "192.0.0.0/24",  # IETF protocol assignments (RFC 6890), incl. DS-Lite, NAT64 discovery
    "192.0.2.0/24",  # TEST-NET-1 (RFC 5737)
    "192.88.99.0/24",  # deprecated 6to4 relay anycast (RFC 7526)
    "198.18.0.0/15",  # benchmarking (RFC 2544)
    "198.51.100.0/24",  # TEST-NET-2 (RFC 5737)
    "203.0.113.0/24",  # TEST-NET-3 (RFC 5737)
    "240.0.0.0/4",  # reserved (RFC 1112), includes 255.255.255.255 broadcast (RFC 919)
)

# --- IPv6 (RFC 6890 and the IANA IPv6 Special-Purpose Address Registry) -------------
LOOPBACK_V6 = IPv6Network("::1/128")  # RFC 4291
LINK_LOCAL_V6 = IPv6Network("fe80::/10")  # RFC 4291
UNIQUE_LOCAL_V6 = IPv6Network("fc00::/7")  # RFC 4193
MULTICAST_V6 = IPv6Network("ff00::/8")  # RFC 4291
GLOBAL_UNICAST_V6 = IPv6Network("2000::/3")  # everything outside it is refused
NAT64_WKP = IPv6Network("64:ff9b::/96")  # RFC 6052 well-known prefix: judged by the IPv4 inside
RESERVED_V6 = _nets6(
    "::/8",  # unspecified, IPv4-compatible (::a.b.c.d) and IPv4-translated forms (RFC 4291, 2765)
    "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215): the IPv4 inside is site-specific
    "100::/64",  # discard-only (RFC 6666)
    "2001::/23",  # IETF protocol assignments (RFC 2928); Teredo 2001::/32 is judged by its IPv4
    "2001:db8::/32",  # documentation (RFC 3849)
    "3fff::/20",  # documentation (RFC 9637)
    "fec0::/10",  # deprecated site-local (RFC 3879)
)

#: Cloud metadata services outside link-local. They sit inside CGNAT and unique-local
#: space, so a covering range must not open them (REQ-3): only an exact /32 or /128.
METADATA = frozenset({IPv4Address("100.100.100.200"), IPv6Address("fd00:ec2::254")})

#: Classes no allowlist entry can exempt.
NEVER_EXEMPT = frozenset({"unspecified", "multicast", "reserved"})


def strip_zone(addr: IPAddress) -> IPAddress:
    """The same address without an IPv6 zone (``fe80::1%eth0`` -> ``fe80::1``)."""
    if isinstance(addr, IPv6Address) and addr.scope_id is not None:
        return IPv6Address(int(addr))
    return addr


def embedded_ipv4(addr: IPv6Address) -> tuple[IPv4Address, ...]:
    """The IPv4 address(es) an IPv6 address carries, or ``()`` when it carries none.

    Teredo carries two (its server and the client behind the NAT); both are judged.
    """
    mapped = addr.ipv4_mapped
    if mapped is not None:
        return (mapped,)
    if addr in NAT64_WKP:
        return (IPv4Address(int(addr) & 0xFFFFFFFF),)
    sixtofour = addr.sixtofour
    if sixtofour is not None:
        return (sixtofour,)
    teredo = addr.teredo
    if teredo is not None:
        return teredo
    return ()


def address_class(addr: IPAddress) -> str | None:
    """The refused class of a plain address (no embedded IPv4), or ``None`` if public.

    Order matters where tables overlap: metadata is checked before CGNAT and
    unique-local, which contain it.
    """
    addr = strip_zone(addr)
    if isinstance(addr, IPv4Address):
        if int(addr) == 0:
            return "unspecified"
        if addr in METADATA:
            return "metadata"
        if addr in LOOPBACK_V4:
            return "loopback"
        if addr in LINK_LOCAL_V4:
            return "link_local"
        if addr in MULTICAST_V4:
            return "multicast"
        if any(addr in net for net in PRIVATE_V4):
            return "private"
        if addr in CGNAT_V4:
            return "cgnat"
        if any(addr in net for net in RESERVED_V4):
            return "reserved"
        return None
    if int(addr) == 0:
        return "unspecified"
    if addr in LOOPBACK_V6:
        return "loopback"
    if addr in METADATA:
        return "metadata"
    if addr in LINK_LOCAL_V6:
        return "link_local"
    if addr in MULTICAST_V6:
        return "multicast"
    if addr in UNIQUE_LOCAL_V6:
        return "unique_local"
    if any(addr in net for net in RESERVED_V6) or addr not in GLOBAL_UNICAST_V6:
        return "reserved"
    return None


def _containing_range(cls: str, addr: IPAddress) -> IPNetwork:
    if cls == "loopback":
        return LOOPBACK_V4 if isinstance(addr, IPv4Address) else LOOPBACK_V6
    return LINK_LOCAL_V4 if isinstance(addr, IPv4Address) else LINK_LOCAL_V6


def _wholly_inside(net: IPNetwork, container: IPNetwork) -> bool:
    if isinstance(net, IPv4Network) and isinstance(container, IPv4Network):
        return net.subnet_of(container)
    if isinstance(net, IPv6Network) and isinstance(container, IPv6Network):
        return net.subnet_of(container)
    return False


def parse_allowlist(entries: Iterable[str | IPNetwork]) -> tuple[IPNetwork, ...]:
    """Parse operator CIDRs strictly: host bits set is a config error, not a guess.

    An IPv4-mapped IPv6 entry (``::ffff:10.0.0.0/104``) becomes its IPv4 network,
    because addresses are judged in their IPv4 form.
    """
    nets: list[IPNetwork] = []
    for entry in entries:
        try:
            net = entry if isinstance(entry, IPv4Network | IPv6Network) else ip_network(entry.strip())
        except ValueError as exc:
            raise ValueError(f"invalid allowlist entry {entry!r}: {exc}") from None
        if isinstance(net, IPv6Network) and net.prefixlen >= 96:
            mapped = net.network_address.ipv4_mapped
            if mapped is not None:
                net = IPv4Network((mapped, net.prefixlen - 96))
        nets.append(net)
    return tuple(nets)


class AddressPolicy:
    """REQ-3's address rules: the class tables, the allowlist and the self rule.

    ``allow`` is the operator allowlist. ``listen`` are Switchboard's own
    ``(host, port)`` listen pairs: an IP host is refused on its port even when
    allowlisted; a name or an unspecified host (0.0.0.0, ::) listens everywhere we
    cannot enumerate, so its port is refused on every address the allowlist exempts.
    """

    def __init__(self, allow: Sequence[IPNetwork], listen: Iterable[tuple[str, int]]) -> None:
        self._allow = tuple(allow)
        self._self_exact: set[tuple[IPAddress, int]] = set()
        self._self_any_port: set[int] = set()
        for host, port in listen:
            if not isinstance(port, int) or not 0 <= port <= 65535:
                raise ValueError(f"invalid listen port {port!r}")
            try:
                listen_ip = strip_zone(ip_address(host.strip("[]").split("%", 1)[0]))
            except ValueError:
                self._self_any_port.add(port)  # a name: we cannot know its addresses
                continue
            if int(listen_ip) == 0:
                self._self_any_port.add(port)  # 0.0.0.0 or ::, listening everywhere
                continue
            for plain in self._plain_forms(listen_ip):
                self._self_exact.add((plain, port))

    @staticmethod
    def _plain_forms(addr: IPAddress) -> tuple[IPAddress, ...]:
        if isinstance(addr, IPv6Address):
            inner = embedded_ipv4(addr)
            if inner:
                return inner
        return (addr,)

    def refusal(self, addr: IPAddress, port: int) -> str | None:
        """Why ``addr:port`` is refused, as a stable reason word, or ``None``."""
        addr = strip_zone(addr)
        if (addr, port) in self._self_exact:
            return "self"
        for plain in self._plain_forms(addr):
            reason = self._plain_refusal(plain, port)
            if reason is not None:
                return reason
        return None

    def _plain_refusal(self, addr: IPAddress, port: int) -> str | None:
        if (addr, port) in self._self_exact:
            return "self"
        cls = address_class(addr)
        if cls is None:
            return None
        if cls in NEVER_EXEMPT or not self._exempts(cls, addr):
            return cls
        if port in self._self_any_port:
            return "self"  # allowlisted, and we may be listening on it
        return None

    def _exempts(self, cls: str, addr: IPAddress) -> bool:
        same_family = [net for net in self._allow if net.version == addr.version]
        if cls == "metadata":
            return any(
                net.prefixlen == net.max_prefixlen and net.network_address == addr for net in same_family
            )
        if cls in ("loopback", "link_local"):
            container = _containing_range(cls, addr)
            return any(addr in net and _wholly_inside(net, container) for net in same_family)
        # private, unique_local, cgnat: any covering entry exempts them.
        return any(addr in net for net in same_family)
