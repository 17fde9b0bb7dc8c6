"""``install_resolver``: the process-wide resolver for validators built without one (tests/conformance's
seam into the real server and its worker processes)."""

from __future__ import annotations

import pytest

from switchboard.push import TargetRejected, Validator, install_resolver


async def test_an_installed_resolver_answers_validators_built_afterwards() -> None:
    asked: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return ["10.0.0.5"]

    install_resolver(resolve)
    try:
        with pytest.raises(TargetRejected) as refused:
            await Validator().check("https://installed.test/hook")
        assert refused.value.reason == "private" and asked == [("installed.test", 443)]

        async def own(host: str, port: int) -> list[str]:
            return ["127.0.0.1"]

        # A validator's own resolver wins over the installed one.
        target = await Validator(resolver=own, allow_cidrs=["127.0.0.1/32"]).check("https://own.test/hook")
        assert target.ips == ("127.0.0.1",) and len(asked) == 1
    finally:
        install_resolver(None)
