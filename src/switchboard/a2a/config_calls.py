"""The push notification config calls (A2A §9.6-§9.9, and a config sent inline with a message): push
must be on, the task the caller's, and the number of configs per task under the ceiling. Split from
handler.py, which counts each call and turns its errors into A2A ones (``surface``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    SendMessageRequest,
    TaskPushNotificationConfig,
)

from switchboard.a2a import errors
from switchboard.a2a.config_types import ConfigInput
from switchboard.a2a.configs import ConfigStore, parse_config
from switchboard.a2a.gate import caller
from switchboard.a2a.views import TaskRecord, config_view
from switchboard.obs.logs import get_logger
from switchboard.push import Validator
from switchboard.store.accounts import Endpoint

log = get_logger("switchboard.a2a")

MAX_PAGE: Final = 100


class ConfigCalls:
    def __init__(
        self,
        *,
        configs: ConfigStore,
        validator: Validator,
        push_enabled: bool,
        ceiling: int,
        own: Callable[[Endpoint, str], Awaitable[TaskRecord]],
    ) -> None:
        self.configs, self.validator, self.own = configs, validator, own
        self.push_enabled = push_enabled
        self.ceiling = ceiling

    async def task(self, context: ServerCallContext, task_id: str) -> Endpoint:
        """Push must be on (-32003 otherwise, A2A §3.3.4), and the task must be the caller's, checked
        before any config is read (§13.1)."""
        if not self.push_enabled:
            raise errors.push_not_supported()
        endpoint = caller(context)
        await self.own(endpoint, task_id)
        return endpoint

    async def create(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        endpoint = await self.task(context, params.task_id)
        if self.ceiling < 1:
            raise errors.ceiling_exceeded(self.ceiling)
        item = await parse(self.validator, params, allow_mint=True)
        view = await self.configs.upsert(endpoint.id, params.task_id, item, self.ceiling)
        if view is None:
            raise errors.task_not_found()
        log.info(
            "a2a push config stored",
            endpoint_id=endpoint.id,
            task_id=params.task_id,
            config=view.config_id,
            host=item.host,
        )
        return config_view(view, reveal=item.credentials if item.minted else None)

    async def get(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        endpoint = await self.task(context, params.task_id)
        view = await self.configs.get(endpoint.id, params.task_id, params.id)
        if view is None:
            raise errors.task_not_found(errors.CONFIG_NOT_FOUND)
        return config_view(view)

    async def listing(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        endpoint = await self.task(context, params.task_id)
        if params.page_size < 0 or params.page_size > MAX_PAGE:
            raise errors.invalid(f"pageSize must be between 1 and {MAX_PAGE} (0 or unset: all)")
        views = await self.configs.list_for_task(endpoint.id, params.task_id)
        start = 0
        if params.page_token:
            ids = [v.config_id for v in views]
            if params.page_token not in ids:
                raise errors.invalid(
                    "pageToken must be a nextPageToken from a previous ListTaskPushNotificationConfigs"
                )
            start = ids.index(params.page_token) + 1
        size = params.page_size or len(views)
        page = views[start : start + size]
        more = start + size < len(views)
        return ListTaskPushNotificationConfigsResponse(
            configs=[config_view(v) for v in page],
            next_page_token=page[-1].config_id if more and page else "",
        )

    async def delete(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        endpoint = await self.task(context, params.task_id)
        if await self.configs.delete(endpoint.id, params.task_id, params.id):
            log.info(
                "a2a push config deleted", endpoint_id=endpoint.id, task_id=params.task_id, config=params.id
            )

    async def inline(self, params: SendMessageRequest) -> ConfigInput | None:
        if not params.configuration.HasField("task_push_notification_config"):
            return None
        if not self.push_enabled:
            raise errors.push_not_supported()
        if self.ceiling < 1:
            raise errors.ceiling_exceeded(self.ceiling)
        item = await parse(
            self.validator, params.configuration.task_push_notification_config, allow_mint=False
        )
        if item.keeps:
            raise errors.invalid(
                "an inline config cannot carry the '[redacted]' placeholder: there is no stored config "
                "to keep a value of; send the real value"
            )
        return item


async def parse(validator: Validator, params: TaskPushNotificationConfig, *, allow_mint: bool) -> ConfigInput:
    auth = params.authentication if params.HasField("authentication") else None
    return await parse_config(
        validator,
        config_id=params.id,
        url=params.url,
        token=params.token,
        scheme=auth.scheme if auth is not None else None,
        credentials=auth.credentials if auth is not None else "",
        allow_mint=allow_mint,
    )
