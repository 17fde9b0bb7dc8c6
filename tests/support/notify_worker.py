"""The notify worker process with the test harness's two seams, as the server starts it under
``SWITCHBOARD_NOTIFY_PROCESS`` (``Services.notify_worker_command``):

``python -m tests.support.notify_worker HOSTS_JSON CA_PEM``: the names in ``HOSTS_JSON`` resolve to
their addresses (test names to loopback; anything else does not resolve) and TLS trusts only the
test CA in ``CA_PEM``, certificate and host-name checks on. Everything else is the real worker.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys

from switchboard.notify.worker import run
from switchboard.obs import configure_logging
from tests.support.receivers import StaticResolver


def main(argv: list[str]) -> int:
    hosts, ca_pem = json.loads(argv[0]), argv[1]
    configure_logging()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=ca_pem)
    return asyncio.run(run(resolver=StaticResolver(hosts), ssl_context=ctx))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
