"""A2A push: the per-destination rate limit is the receiving address's, not the URL's host name (issue 14:
"many names for one IP escape them"). A server with a burst of 2 and 6 deliveries per minute per
destination; four deliveries to two names that both resolve to 127.0.0.1."""

from __future__ import annotations

import asyncio

from tests.conformance.harness import Conf, ServerSpec, delta, receiver
from tests.conformance.test_a2a_push import pair, push_config

SERVER = ServerSpec(
    "a2a-limits",
    {"a2a_push_allow_cidrs": "127.0.0.1/32", "a2a_push_host_rate_per_minute": 6, "a2a_push_host_burst": 2},
    humans=("alice",),
    hosts={"one.test": ["127.0.0.1"], "two.test": ["127.0.0.1"]},
)


async def test_a2a_push_limits_are_keyed_by_the_pinned_address_not_the_host_name(conf: Conf) -> None:
    before = await conf.metrics()
    async with receiver(names=("one.test", "two.test")) as rcv, pair(conf) as p:
        for name in ("one.test", "two.test", "one.test", "two.test"):
            await p.send(f"to {name}", push=push_config(f"https://{name}:{rcv.port}/a2a"))
        # At 6 a minute with a burst of 2 (2 in any 20 s), a third delivery to 127.0.0.1 is due 20 s after
        # the burst: within 4 s only the burst of 2 may arrive, whatever names the URLs use.
        await asyncio.sleep(4.0)
        assert len(rcv.requests) <= 2, f"{len(rcv.requests)} deliveries to one address within 4 s"
        assert delta(await conf.metrics(), before, "switchboard_a2a_push_attempts_total", result="2xx") <= 2
