"""Fixture factories for the test modules that drive a real server: an engine of their own, a
uvicorn server on loopback over an engine, an openai client, and the served model's id.

Each factory returns a module-scoped fixture, so a module pays for its server once; a module binds
them to the names its tests ask for (`server = server_fixture(max_body_bytes=256 * 1024)`). Where a
fixture stands on another (a server on an engine, a client on a server), it is named by its fixture
name, so one module can hold two servers over one engine."""

from __future__ import annotations

from typing import Any, Callable

import openai
import pytest

MODULE = "module"


def engine_fixture(**engine_options: Any) -> Callable:
    """An engine of the module's own (`sgrun.Engine(**engine_options)`), closed after the module;
    for modules whose settings differ from conftest's `shared_engine`."""
    @pytest.fixture(scope=MODULE)
    def engine():
        import sgrun
        eng = sgrun.Engine(**engine_options)
        yield eng
        eng.close()
    return engine


def server_fixture(engine: str = "shared_engine", **app_options: Any) -> Callable:
    """`build_app(<the fixture named engine>, **app_options)` served on a loopback port."""
    @pytest.fixture(scope=MODULE)
    def server(request):
        from sgrun.server.app import build_app
        from server_thread import ServerThread
        with ServerThread(build_app(request.getfixturevalue(engine), **app_options)) as srv:
            yield srv
    return server


def client_fixture(server: str = "server", timeout: float = 120, api_key: str = "unused") -> Callable:
    """The official openai client on the fixture named `server`, without retries (a failure shows
    as itself); `timeout` is per request, sized to the module's longest generation."""
    @pytest.fixture(scope=MODULE)
    def client(request):
        url = request.getfixturevalue(server).url
        return openai.OpenAI(base_url=url + "/v1", api_key=api_key, max_retries=0, timeout=timeout)
    return client


def model_fixture(server: str = "server") -> Callable:
    """The id the fixture named `server` serves its model under (asked of /v1/models by the openai
    client, as a user would)."""
    @pytest.fixture(scope=MODULE)
    def model(request):
        url = request.getfixturevalue(server).url
        return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0).models.list().data[0].id
    return model
