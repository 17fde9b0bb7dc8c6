"""The instance page: counts for the instance operator, and nothing that names a tenant's rows."""

from __future__ import annotations

from starlette.responses import Response

from switchboard import __version__
from switchboard.notify.component import NotifyComponent
from switchboard.web.errors import NotFound
from switchboard.web.page import Visit


async def instance(v: Visit) -> Response:
    if not v.me.is_operator:
        raise NotFound()
    counts = await v.web.store.instance_counts()
    notify = v.web.services.parts.get(NotifyComponent)
    return v.render(
        "instance.html",
        title="Instance",
        nav="instance",
        counts=counts,
        version=__version__,
        instance_id=v.web.services.instance_id,
        database=v.web.services.db.dialect,
        hooks_on=notify is not None and notify.enabled,
        oauth_on=v.web.oauth is not None,
    )
