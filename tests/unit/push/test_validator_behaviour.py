"""Validator behaviour around the table: lookups, configuration, the target object and
URL redaction."""

from __future__ import annotations

import asyncio
import socket

import pytest

from switchboard.push import (
    AttemptTimeout,
    NetworkFailure,
    TargetRejected,
    ValidatedTarget,
    Validator,
    redact_url,
)

PUBLIC = "93.184.215.14"


def answering(*answers: object) -> object:
    async def resolver(host: str, port: int) -> object:
        return list(answers)

    return resolver


async def failing(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


async def hanging(host: str, port: int) -> list[str]:
    await asyncio.Event().wait()
    return []


async def wrong_type(host: str, port: int) -> list[str]:
    return PUBLIC  # type: ignore[return-value]  # a str, not a list


@pytest.mark.parametrize(
    "resolver",
    [
        answering(),
        failing,
        answering("not-an-ip"),
        answering("127.1"),
        answering(None),
        answering(PUBLIC, 7),
        wrong_type,
    ],
    ids=["empty", "nxdomain", "garbage", "non-canonical-ip", "none", "non-string", "string-not-list"],
)
async def test_failed_lookup_is_unresolvable_at_create_and_dns_at_attempt(resolver: object) -> None:
    validator = Validator(resolver=resolver)  # type: ignore[arg-type]
    with pytest.raises(TargetRejected) as rejected:
        await validator.check("https://h.example/")
    assert rejected.value.reason == "unresolvable"
    with pytest.raises(NetworkFailure) as failed:
        await validator.check_attempt("https://h.example/")
    assert (failed.value.stage, failed.value.reason, failed.value.retryable) == ("connect", "dns", True)


async def test_lookup_timeout_is_unresolvable_at_create_and_a_timeout_at_attempt() -> None:
    validator = Validator(resolver=hanging, timeout=0.05)
    with pytest.raises(TargetRejected) as rejected:
        await validator.check("https://h.example/")
    assert rejected.value.reason == "unresolvable"
    with pytest.raises(AttemptTimeout) as timed_out:
        await validator.check_attempt("https://h.example/")
    assert (timed_out.value.stage, timed_out.value.reason) == ("connect", "dns_timeout")


async def test_attempt_check_still_rejects_refused_addresses() -> None:
    with pytest.raises(TargetRejected) as info:
        await Validator(resolver=answering("10.0.0.1")).check_attempt("https://h.example/")  # type: ignore[arg-type]
    assert info.value.reason == "private"


async def test_default_resolver_uses_the_system_resolver() -> None:
    """``localhost`` comes from the hosts file: no query leaves the machine."""
    with pytest.raises(TargetRejected) as info:
        await Validator().check("https://localhost:9443/")
    assert info.value.reason == "loopback"
    target = await Validator(allow_cidrs=["127.0.0.0/8", "::1/128"]).check("https://localhost:9443/")
    assert target.ips and set(target.ips) <= {"127.0.0.1", "::1"}


@pytest.mark.parametrize("cidr", ["10.0.0.1/8", "not-a-cidr", "10.0.0.0/33", "::1/129"])
def test_invalid_allowlist_entry_is_a_config_error(cidr: str) -> None:
    with pytest.raises(ValueError, match="allowlist"):
        Validator(allow_cidrs=[cidr])


@pytest.mark.parametrize("port", [-1, 65536, "8080"])
def test_invalid_listen_port_is_a_config_error(port: object) -> None:
    with pytest.raises(ValueError, match="listen port"):
        Validator(listen_addresses=[("127.0.0.1", port)])  # type: ignore[list-item]


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout"):
        Validator(timeout=0)


async def test_target_fields_redaction_and_repr() -> None:
    validator = Validator(resolver=answering(PUBLIC, "2606:4700::1"))  # type: ignore[arg-type]
    target = await validator.check("https://Hooks.Example.:8443/a/b?token=s3cret#frag")
    assert target == ValidatedTarget(
        "https", "hooks.example", 8443, "/a/b?token=s3cret", (PUBLIC, "2606:4700::1")
    )
    assert target.redacted == "https://hooks.example:8443/a/b?[redacted]"
    assert target.authority == "hooks.example:8443"
    assert "s3cret" not in repr(target)
    with pytest.raises(AttributeError):
        target.host = "evil.example"  # type: ignore[misc]


async def test_default_port_and_ipv6_formatting() -> None:
    target = await Validator().check("https://[2606:4700:4700::1111]/x")
    assert target.authority == "[2606:4700:4700::1111]"
    assert target.redacted == "https://[2606:4700:4700::1111]/x"


async def test_rejection_messages_never_carry_the_url() -> None:
    validator = Validator(resolver=answering("10.0.0.1"))  # type: ignore[arg-type]
    for url in ("https://h.example/?token=s3cret", "https://u:s3cret@h.example/", "http://h.example/?s3cret"):
        with pytest.raises(TargetRejected) as info:
            await validator.check(url)
        assert "s3cret" not in str(info.value)
        assert "h.example" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://h.example/hook?token=abc", "https://h.example/hook?[redacted]"),
        ("https://h.example/hook", "https://h.example/hook"),
        ("https://user:pw@h.example:8443/x?y#frag", "https://h.example:8443/x?[redacted]"),
        ("https://H.Example:443/x", "https://h.example/x"),
        ("http://h.example:80/", "http://h.example/"),
        ("https://[::1]:8443/p?q=1", "https://[::1]:8443/p?[redacted]"),
        ("https://h.example/a b\r\nX-Injected: 1", "https://h.example/a%20bX-Injected:%201"),
        ("https://h.example:99999/x?q", "https://h.example/x?[redacted]"),
        ("not a url", "[unparsable url]"),
        ("https://[::1/", "[unparsable url]"),
        ("", "[unparsable url]"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_url_never_raises() -> None:
    for junk in (None, 42, b"https://h/?q", "\ud800", "https://\udcff/?q=1"):
        assert isinstance(redact_url(junk), str)  # type: ignore[arg-type]
