"""Fixtures for the sandbox HTTP layer tests."""

from __future__ import annotations

import pytest

from posttrain.sandbox.server import BackgroundServer, create_app
from tests.unit.sandbox.fakes import SubprocessSandbox


@pytest.fixture
def subprocess_sandbox() -> SubprocessSandbox:
    return SubprocessSandbox()


@pytest.fixture
def served():
    """served(app) -> base URL of `app` running on 127.0.0.1; stopped after the test."""
    servers: list[BackgroundServer] = []

    def start(app_or_sandbox, **app_kwargs) -> str:
        app = app_or_sandbox if hasattr(app_or_sandbox, "router") else create_app(app_or_sandbox, **app_kwargs)
        server = BackgroundServer(app)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def local_sandbox():
    """A real, isolated LocalSandbox (bubblewrap is installed by `make test`)."""
    from posttrain.sandbox import LocalSandbox

    sandbox = LocalSandbox(max_workers=2, max_queue=8, isolation="bwrap")
    yield sandbox
    sandbox.close()
