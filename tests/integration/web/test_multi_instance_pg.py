"""Two instances on one PostgreSQL: a session and an OAuth flow started on one are honoured by the
other, because sessions, codes and tokens live in the database and the signing key derives from the
shared cred key. Also runs every web summary query on PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from switchboard.core.clock import ManualClock
from switchboard.core.verbs import DEFAULT_GRANT, NOTIFY_HOOKS
from switchboard.notify.component import NotifyComponent
from tests.integration.web.helpers import PASSWORD, Human, ManualFlow
from tests.support.mcp_client import agent
from tests.support.server import make_settings, run_instance

pytestmark = pytest.mark.postgres


async def test_two_instances_share_sessions_and_oauth(tmp_path: Path, pg_url: str) -> None:
    clock = ManualClock(time.time())
    async with (
        run_instance(make_settings(tmp_path / "one", pg_url), clock=clock) as one,
        run_instance(make_settings(tmp_path / "two", pg_url), clock=clock) as two,
    ):
        human_id = await one.services.accounts.create_human("pg@example.com", PASSWORD, operator=True)
        endpoint, token = await one.services.accounts.vend_endpoint(
            human_id, "pg-agent", ["inbox"], [*DEFAULT_GRANT, *NOTIFY_HOOKS.verbs]
        )
        notify = two.services.parts.need(NotifyComponent)
        assert isinstance(notify, NotifyComponent)
        hook, _ = await notify.store.create(endpoint.id, "https://hooks.example.com/pg", [], False, 5)

        person = Human(one, "pg@example.com")
        try:
            assert (await person.sign_in()).status_code == 303
            # The same browser, now talking to instance two.
            person.http.base_url = httpx.URL(two.base_url)
            card = await person.http.get("/endpoints/pg-agent")
            assert card.status_code == 200 and hook.id in card.text
            assert (await person.http.get("/endpoints")).status_code == 200
            assert (await person.http.get("/instance")).status_code == 200
            r = await person.post(f"/endpoints/pg-agent/hooks/{hook.id}/disable", {})
            assert r.status_code == 303

            # OAuth: consent on instance two for a flow whose /authorize ran on instance one.
            flow = ManualFlow(one, person)
            person.http.base_url = httpx.URL(one.base_url)
            page = await flow.start()
            person.http.base_url = httpx.URL(two.base_url)
            answer = await flow.answer(
                page, target="existing", endpoint="pg-agent", verbs=["list_notify_hooks"]
            )
            assert answer.status_code == 303, answer.text
            code = parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]
            tokens = (await flow.exchange(code)).json()
        finally:
            await person.close()

        async with (
            agent(one.mcp_url, tokens["access_token"]) as via_oauth,
            agent(two.mcp_url, token) as via_bearer,
        ):
            for a in (via_oauth, via_bearer):
                hooks = (await a.ok("list_notify_hooks"))["hooks"]
                assert [(h["enabled"], h["disabled_reason"]) for h in hooks] == [(False, "operator")]
            assert (await via_oauth.call("claim_next", {})).code == "forbidden"
