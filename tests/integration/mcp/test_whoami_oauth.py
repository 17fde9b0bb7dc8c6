"""``whoami`` reports what the presented token may do (issue 19, item 6): under an OAuth access token,
the verbs its human granted (within the endpoint's scope), not the endpoint's whole scope."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from switchboard.core.clock import ManualClock
from switchboard.core.verbs import DEFAULT_GRANT
from tests.integration.web.helpers import Consent, human, oauth_agent
from tests.support.mcp_client import agent
from tests.support.server import Instance, make_settings, run_instance


@pytest.fixture
async def web_inst(tmp_path: Path) -> AsyncIterator[Instance]:
    # Near real time: the SDK compares OAuth token expiries with time.time().
    async with run_instance(make_settings(tmp_path), clock=ManualClock(time.time())) as instance:
        yield instance


async def test_whoami_reports_the_oauth_grant_not_the_endpoint_scope(web_inst: Instance) -> None:
    accounts = web_inst.services.accounts
    async with human(web_inst, "bo@example.com") as (person, human_id):
        endpoint, bearer = await accounts.vend_endpoint(human_id, "worker", ["inbox"], list(DEFAULT_GRANT))
        consent = Consent(target="existing", endpoint="worker", verbs=["claim_next", "list_todos"])
        async with oauth_agent(web_inst, person, consent) as by_oauth:
            me = await by_oauth.ok("whoami")
            assert me["via"] == "oauth"
            assert me["verbs"] == ["claim_next", "list_todos"]
            assert me["endpoint_verbs"] == sorted(DEFAULT_GRANT)
            await accounts.set_scope(endpoint.id, verbs=["list_todos", "ack"])  # shrinking shows at once
            assert (await by_oauth.ok("whoami"))["verbs"] == ["list_todos"]
        async with agent(web_inst.mcp_url, bearer) as by_bearer:
            me = await by_bearer.ok("whoami")
            assert me["via"] == "endpoint_credential" and me["verbs"] == ["ack", "list_todos"]
