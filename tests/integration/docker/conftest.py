"""The docker tests' one engine is shared by the session: what one test leaves on it (a failure
between its start and its own cleanup) must not fail every later test's "nothing left" check.
After each test that used the engine, whatever a run left (containers and networks labelled
``tfcluster.name``) is removed and named as that test's error, so the blame stays with it."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _nothing_left_on_the_engine(request):
    yield
    if "docker_engine" not in request.fixturenames:
        return
    engine = request.getfixturevalue("docker_engine")
    client = engine.client()
    try:
        containers = client.containers.list(all=True, filters={"label": "tfcluster.name"})
        networks = client.networks.list(filters={"label": "tfcluster.name"})
        for c in containers:
            c.remove(force=True)
        for n in networks:
            n.remove()
    finally:
        client.close()
    left = [c.name for c in containers] + [n.name for n in networks]
    if left:
        pytest.fail(f"this test left {left} on the engine (removed now, so later tests start clean)",
                    pytrace=False)
