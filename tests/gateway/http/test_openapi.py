"""/openapi.json says what the /v1 routes do: every operation with its bodies, the key and every status it
answers (409, 429 with Retry-After); a title whose generated client does not take our client's names; the
strings the routes refuse (placeholder subjects, malformed chats, years outside 1970-2099) are outside
its patterns; timestamp optional where it defaults to now; RRF's real k; a 405 lists the path's methods.
schemathesis with every check (coverage and fuzzing phases, a small budget) against the real app finds
nothing."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway.config import RateLimitSettings, TenantSettings, load_settings
from gateway.http import patterns
from gateway.http.app import create_app
from memory.errors import MetadataError, NamespaceError
from memory.metadata import MAX_KEYS, check_metadata
from memory.recall import RRF_K
from memory.types import SUBJECT_RE, ChatRef, not_a_person

schemathesis = pytest.importorskip("schemathesis")

LOOPBACK = ("127.0.0.1", 50000)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def running():
    """The real app (SQLite + LanceDB in tmp), started, and an admin key of tenant default."""
    app = create_app(load_settings(tenants={"default": TenantSettings(language="en")}))
    with TestClient(app, client=LOOPBACK):
        key = app.state.pipeline.core.store.create_api_key("default", "admin")[1]
        yield app, key


def _doc() -> dict:
    return create_app(load_settings()).openapi()


def _v1_operations(doc: dict):
    return [(p, m, op) for p, item in doc["paths"].items() if p.startswith("/v1") for m, op in item.items()]


def test_every_v1_operation_declares_its_bodies_the_key_and_its_statuses():
    """Each /v1 operation has a response schema, ErrorOut for 400/401/403/404/409/413/429 (no 422: validation
    errors answer 400), 429's Retry-After header, a JSON request body where it takes one, and the API-key
    security schemes."""
    doc = _doc()
    schemes = doc["components"]["securitySchemes"]
    assert {"APIKeyHeader", "HTTPBearer"} <= set(schemes) and schemes["APIKeyHeader"]["name"] == "X-API-Key"
    ops = _v1_operations(doc)
    assert len(ops) >= 13
    for path, method, op in ops:
        assert "$ref" in op["responses"]["200"]["content"]["application/json"]["schema"], (path, method)
        for code in ("400", "401", "403", "404", "409", "413", "429"):
            assert op["responses"][code]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
        assert op["responses"]["429"]["headers"]["Retry-After"]["schema"]["type"] == "integer"
        assert {"APIKeyHeader": []} in op["security"]
        assert "422" not in op["responses"]
        if method in ("post", "patch"):
            assert "$ref" in op["requestBody"]["content"]["application/json"]["schema"], (path, method)


def _generated_client_names(title: str) -> tuple[str, str]:
    """What openapi-python-client names a client of a schema titled ``title``: the project
    ``<kebab title>-client`` and its package, that name in snake case (its defaults, ``config.py``)."""
    words = re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", title)
    project = "-".join(w.lower() for w in words) + "-client"
    return project, project.replace("-", "_")


def test_a_client_generated_from_the_schema_does_not_take_our_clients_names():
    """Our client is huiyi-client / huiyi_client; the schema's title must make a generator choose other ones."""
    ours = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text())["project"]["name"]
    assert ours == "huiyi-client" and (ROOT / "clients/python/huiyi_client").is_dir()
    project, package = _generated_client_names(_doc()["info"]["title"])
    assert project != ours and package != "huiyi_client", (project, package)


def test_the_schema_says_timestamp_defaults_and_rrf_k_is_the_real_one(running):
    """A turn's message may leave out timestamp (it defaults to now), and the turn answers without it; the
    score parts describe RRF with memory.recall.RRF_K, not 60."""
    app, key = running
    schemas = app.openapi()["components"]["schemas"]
    turn_message = schemas[schemas["TurnRequest"]["properties"]["message"]["$ref"].rsplit("/", 1)[1]]
    assert "timestamp" not in turn_message["required"] and "now" in turn_message["properties"]["timestamp"]["description"]
    rrf = schemas["ScorePartsOut"]["properties"]["rrf"]["description"]
    assert f"k = {RRF_K}" in rrf and "60" not in str(schemas["ScorePartsOut"])
    c = TestClient(app, client=LOOPBACK, headers={"X-API-Key": key})
    for text in ("我的猫叫煤球", "My cat is called Mochi"):
        r = c.post("/v1/turns", json={"message": {"platform": "tg", "message_id": text[:3], "sender_id": "42",
                                                  "chat_kind": "private", "chat_id": "42", "text": text}})
        assert r.status_code == 200, r.text


SUBJECTS = ["tg:42", "qq:10001", "person:abc123", "tg:0", "tg:000", "tg:None", "qq:NULL", "person:undefined",
            "tg:-1", "tg:-", "tg:nan", "tg:1087968824", "tg:777000", "qq:80000000", "web:80000000", "tg:0x1",
            "wx:o6_bmjrPTlm6_2sgVt7hMZOPfL2M", "tg:None1", "Tg:42", "tg:", "tg:a b"]


@pytest.mark.parametrize("subject", SUBJECTS)
def test_the_subject_pattern_refuses_what_the_core_refuses(subject):
    """patterns.SUBJECT matches a subject exactly when the core takes it as one person's
    (memory.identity.resolve_subject: SUBJECT_RE, then not_a_person)."""
    kind, _, uid = subject.partition(":")
    core_ok = SUBJECT_RE.fullmatch(subject) is not None and not_a_person(kind, uid) is None
    assert bool(re.search(patterns.SUBJECT, subject)) == core_ok


@pytest.mark.parametrize("key", ["tg:private:42", "tg:group:-100123", "tg:group:-100123:7", "qq:group:1",
                                 "", "tg:nonsense", "tg:room:1", "tg:group:", "tg:group:1:2:3", "TG:private:1",
                                 "000000"])
def test_the_chat_pattern_is_what_chatref_parses(key):
    """patterns.CHAT_KEY matches exactly the keys ChatRef.parse takes."""
    try:
        ChatRef.parse(key)
        parsed = True
    except NamespaceError:
        parsed = False
    assert bool(re.search(patterns.CHAT_KEY, key)) == parsed


@pytest.mark.parametrize("key", ["topic", "a.b-c_d", "_x", "9", "x" * 40, "x" * 41, "", "bad key", "$or", "-x",
                                 ".x", "k/1", "猫", "a:b"])
def test_the_metadata_key_pattern_in_the_schema_is_the_cores(key):
    """Every metadata object of a request (capture, edit, batch edit, import, search filters) names its keys'
    pattern (propertyNames), and it matches exactly the keys memory.metadata takes; a filter's own key
    pattern adds $or alone."""
    schemas = _doc()["components"]["schemas"]

    def metadata_of(model: str, field: str) -> dict:
        prop = schemas[model]["properties"][field]
        return next(s for s in prop.get("anyOf", [prop]) if s.get("type") == "object")

    try:
        check_metadata({key: 1})
        core_ok = True
    except MetadataError:
        core_ok = False
    for model, field in (("CaptureIn", "metadata"), ("UpdateIn", "metadata"), ("BatchUpdateItem", "metadata"),
                         ("ExportedMemory", "metadata")):
        names = metadata_of(model, field)["propertyNames"]["pattern"]
        assert bool(re.search(names, key)) == core_ok, (model, key)
        assert metadata_of(model, field)["maxProperties"] == MAX_KEYS
    filters = metadata_of("SearchIn", "filters")
    assert bool(re.search(filters["propertyNames"]["pattern"], key)) == (core_ok or key == "$or")


def test_no_request_model_is_a_top_level_union_a_generator_cannot_name():
    """A model with properties carries no top-level anyOf/oneOf (openapi-python-client read UpdateIn's as a
    union of two models and the edit modules it generated did not import); UpdateIn still says that text
    or metadata is required."""
    schemas = _doc()["components"]["schemas"]
    for name, schema in schemas.items():
        if "properties" in schema:
            assert not {"anyOf", "oneOf"} & set(schema), name
    needs = schemas["UpdateIn"]["allOf"][0]["anyOf"]
    assert [alt["required"] for alt in needs] == [["text"], ["metadata"]]


def test_a_wrong_method_answers_405_with_every_method_of_the_path(running):
    """OPTIONS (or PUT) on a memory answers 405 with Allow naming GET, PATCH and DELETE, not one of them."""
    app, key = running
    c = TestClient(app, client=LOOPBACK, headers={"X-API-Key": key})
    r = c.request("OPTIONS", "/v1/subjects/tg:42/memories/abc123")
    assert r.status_code == 405 and r.json()["error"] == "MethodNotAllowed"
    assert {m.strip() for m in r.headers["Allow"].split(",")} >= {"GET", "PATCH", "DELETE"}
    assert {m.strip() for m in c.put("/v1/subjects/tg:42/memories").headers["Allow"].split(",")} >= {"GET", "POST"}


def test_schemathesis_with_every_check_finds_nothing():
    """schemathesis' coverage phase (boundary and invalid values, unexpected methods) and a fuzzing pass (one
    example per operation) with every check, in process against the real app and an admin key: no 5xx, no
    status, header or body outside the schema, no schema-valid request refused, no invalid one accepted.
    Two operations hold what no schema can say, so their refusals of schema-valid values are expected:
    ``filters`` of the memory list (a JSON object inside a query string), and ``confirm`` (the path's
    subject again) and ``chat`` (a group of the person's platform) of the scoped forget; and the file of
    ``/v1/imports`` (what a mem0 export or a MaiBot database is, no JSON schema says)."""
    from schemathesis.config import SchemathesisConfig
    from schemathesis.engine import Status, events, from_schema
    from schemathesis.python.asgi import shutdown_lifespans

    app = create_app(load_settings(rate_limit=RateLimitSettings(enabled=False),
                                   tenants={"default": TenantSettings(language="en")}))
    config = SchemathesisConfig.from_dict({
        "seed": 26, "request-timeout": 120, "generation": {"max-examples": 1, "database": "none"}, "checks": {"enabled": True},
        "phases": {"examples": {"enabled": False}, "stateful": {"enabled": False},
                   "coverage": {"enabled": True, "unexpected-methods": ["put"]}, "fuzzing": {"enabled": True}}})
    unsayable = {"GET /v1/subjects/{subject}/memories", "DELETE /v1/subjects/{subject}/memories", "POST /v1/imports"}
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)  # starts the app's lifespan
    try:
        key = app.state.pipeline.core.store.create_api_key("default", "admin")[1]
        schema.config.headers = {"X-API-Key": key}
        found, tested = [], set()
        for event in from_schema(schema.include(path_regex="^/v1")).execute():
            if isinstance(event, (events.NonFatalError, events.FatalError)):
                found.append(f"{event}")
            if not isinstance(event, events.ScenarioFinished):
                continue
            tested.add(event.recorder.label)
            for nodes in event.recorder.checks.values():
                found += [f"{n.failure_info.failure.code} {event.recorder.label}: {n.failure_info.failure.title}\n"
                          f"{n.failure_info.code_sample}" for n in nodes
                          if n.status == Status.FAILURE and n.failure_info is not None
                          and not (n.failure_info.failure.code == "ST202" and event.recorder.label in unsayable)]
    finally:
        shutdown_lifespans()
    assert len(tested) >= 13
    assert not found, "\n".join(found[:10])
