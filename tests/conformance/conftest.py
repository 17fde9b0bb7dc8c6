"""Conformance fixtures: each module names the servers it needs (``SERVER``, optionally ``SERVERS``),
every selected module's servers are started together at its first test, and a module's ``conf``
fixture waits for its own and stops it when the module is done (after checking its whole log for any
revealed secret)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.conformance.harness import FLEET, Conf, ServerSpec
from tests.support.secrets import leaks


def specs_of(module: ModuleType) -> list[ServerSpec]:
    found: list[ServerSpec] = []
    if isinstance(getattr(module, "SERVER", None), ServerSpec):
        found.append(module.SERVER)
    found += [s for s in getattr(module, "SERVERS", ()) if isinstance(s, ServerSpec)]
    return found


_started = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark this suite ``conformance``, so ``-m "not conformance"`` leaves it out of a quick run."""
    for item in items:
        if item.nodeid.startswith("tests/conformance/"):
            item.add_marker(pytest.mark.conformance)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """At the first conformance test, start every selected module's servers, in parallel (their start-up
    overlaps the first tests). Not at collection: a run that selects no conformance test, or a
    pytest-xdist worker that is given none, starts none. scripts/test runs this suite in a process of its
    own, beside the other tests' workers (its modules share servers)."""
    global _started
    if _started:
        return
    _started = True
    seen: set[str] = set()
    for each in item.session.items:
        module = getattr(each, "module", None)
        if module is None or not module.__name__.startswith("tests.conformance.") or module.__name__ in seen:
            continue
        seen.add(module.__name__)
        for spec in specs_of(module):
            FLEET.users[spec.name] = FLEET.users.get(spec.name, 0) + 1
            FLEET.prestart(spec)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    FLEET.stop_all()


def _checked(conf: Conf) -> None:
    leaked = leaks(conf.raw_log().splitlines())
    assert not leaked, f"{conf.spec.name}: revealed secrets in the server log: {leaked[:5]}"


@pytest.fixture(scope="module")
def conf(request: pytest.FixtureRequest) -> Iterator[Conf]:
    """The module's ``SERVER``, ready."""
    spec: ServerSpec = request.module.SERVER
    server = FLEET.get(spec)
    yield server
    FLEET.done(spec, _checked)


@pytest.fixture(scope="module")
def confs(request: pytest.FixtureRequest) -> Iterator[dict[str, Conf]]:
    """The module's ``SERVERS``, ready, by name."""
    specs: list[ServerSpec] = list(request.module.SERVERS)
    servers = {spec.name: FLEET.get(spec) for spec in specs}
    yield servers
    for spec in specs:
        FLEET.done(spec, _checked)
