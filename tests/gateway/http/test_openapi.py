"""/openapi.json describes every /v1 route with its request and response bodies, and
schemathesis, generating requests from it against the real app with an admin key,
finds no 5xx and no answer outside the schema (bounded: a few examples per route)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from gateway.http.app import create_app
from gateway.config import TenantSettings, load_settings

schemathesis = pytest.importorskip("schemathesis")

EXAMPLES_PER_ROUTE = 6


@pytest.fixture
def running():
    """The real app (SQLite + LanceDB in tmp), started, and an admin key of tenant default."""
    app = create_app(load_settings(tenants={"default": TenantSettings(language="en")}))
    with TestClient(app, client=("127.0.0.1", 50000)):
        key = app.state.pipeline.core.store.create_api_key("default", "admin")[1]
        yield app, key


def test_every_v1_operation_declares_its_bodies_and_the_key(running):
    """Each /v1 operation has a response schema, the error schema for 400/401/403 (no 422: validation errors
    answer 400), a JSON request body where it takes one, and the API-key security schemes."""
    app, _ = running
    doc = app.openapi()
    schemes = doc["components"]["securitySchemes"]
    assert {"APIKeyHeader", "HTTPBearer"} <= set(schemes) and schemes["APIKeyHeader"]["name"] == "X-API-Key"
    ops = [(p, m, op) for p, item in doc["paths"].items() if p.startswith("/v1") for m, op in item.items()]
    assert len(ops) >= 13
    for path, method, op in ops:
        ok = op["responses"]["200"]["content"]["application/json"]["schema"]
        assert "$ref" in ok, (path, method)
        assert op["responses"]["401"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
        assert {"APIKeyHeader": []} in op["security"]
        assert "422" not in op["responses"] and "400" in op["responses"]  # validation errors are 400 ErrorOut
        if method in ("post", "patch"):
            assert "$ref" in op["requestBody"]["content"]["application/json"]["schema"], (path, method)


def test_schemathesis_finds_no_server_error_and_no_schema_violation(running):
    """Generated requests on every /v1 operation (admin key): never a 5xx, status codes, content types and
    bodies as the schema declares them."""
    from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                                   status_code_conformance)
    from schemathesis.checks import not_a_server_error

    app, key = running
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    operations = [op.ok() for op in schema.get_all_operations()]
    operations = [op for op in operations if op.path.startswith("/v1")]
    assert len(operations) >= 13
    for operation in operations:

        @settings(max_examples=EXAMPLES_PER_ROUTE, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def run(case):
            response = case.call(headers={"X-API-Key": key})
            case.validate_response(response, checks=checks)

        run()
