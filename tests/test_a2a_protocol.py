"""The A2A JSON-RPC binding over real HTTP on loopback: header rules, envelope,
method table, params, media types, AAP error shapes and bad input.

Every response is validated against the seed's ``JsonRpcResponse`` schema and
every ``aap.error`` against ``Error`` (see http_helpers.assert_valid_response).
"""

from __future__ import annotations

import base64
import json
import uuid

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aap import EXTENSION_URI
from aap.config.model import RateLimit
from aap.spec import validate
from factories import deployment_fixture, http_fixture
from http_helpers import (
    AAP_HEADERS,
    BAD_REQUEST,
    ERROR_INFO,
    aap_error_of,
    assert_valid_response,
    detail_of,
    send_message,
)

DEALER = {"type": "dealer.information.request"}
DEALER_REQ = "application/vnd.autoagent.dealer-information-request+json"
DEALER_RESP = "application/vnd.autoagent.dealer-information-response+json"
SEARCH_REQ = "application/vnd.autoagent.inventory-search-request+json"


deployment = deployment_fixture("a2a", rate_limit=RateLimit(enabled=False))


http = http_fixture()


def call(http: httpx.Client, body, headers=AAP_HEADERS, *, raw: bytes | None = None):
    """POST to /a2a; always HTTP 200 with a schema-valid JSON-RPC response."""
    if raw is not None:
        response = http.post("/a2a", content=raw, headers={"Content-Type": "application/json", **headers})
    else:
        response = http.post("/a2a", json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    payload = response.json()
    assert_valid_response(payload)
    return response, payload


def assert_error_code(payload) -> int:
    assert "result" not in payload, payload
    return payload["error"]["code"]


# -- success shape --------------------------------------------------------------------
def test_send_message_result_shape(http):
    body = send_message(DEALER, request_id="abc")
    response, payload = call(http, body)
    assert payload["id"] == "abc"
    message = payload["result"]["message"]
    assert message["role"] == "ROLE_AGENT"
    assert message["messageId"] and message["messageId"] != body["params"]["message"]["messageId"]
    assert message["contextId"]
    (part,) = message["parts"]
    assert part["mediaType"] == DEALER_RESP
    assert part["data"]["type"] == "dealer.information.response"
    assert validate(part["data"], "dealer-information-response") == []
    assert response.headers["A2A-Extensions"] == EXTENSION_URI


def test_numeric_id_echoed_and_context_preserved(http):
    _, payload = call(http, send_message(DEALER, request_id=42, context_id="ctx-123"))
    assert payload["id"] == 42
    assert payload["result"]["message"]["contextId"] == "ctx-123"


def test_fresh_context_and_message_ids_per_call(http):
    _, a = call(http, send_message(DEALER))
    _, b = call(http, send_message(DEALER))
    assert a["result"]["message"]["contextId"] != b["result"]["message"]["contextId"]
    assert a["result"]["message"]["messageId"] != b["result"]["message"]["messageId"]


# -- A2A-Version ----------------------------------------------------------------------------
@pytest.mark.parametrize("headers", [{}, {"A2A-Version": "1.0"}, {"A2A-Version": "1.0.2"}, {"a2a-version": "1.0"}])
def test_version_accepted(http, headers):
    _, payload = call(http, send_message(DEALER), headers)
    assert "result" in payload


@pytest.mark.parametrize("value", ["", "0.3", "0.3.0", "1.1", "2.0", "1", "1.0-beta", "1.0, 0.3"])
def test_version_rejected(http, value):
    response, payload = call(http, send_message(DEALER), {"A2A-Version": value})
    assert assert_error_code(payload) == -32009
    info = detail_of(payload, ERROR_INFO)
    assert info["reason"] == "VERSION_NOT_SUPPORTED" and info["domain"] == "a2a-protocol.org"
    assert "1.0" in payload["error"]["message"]
    assert aap_error_of(payload) is None
    assert "A2A-Extensions" not in response.headers


# -- A2A-Extensions ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        None,
        EXTENSION_URI,
        f"{EXTENSION_URI} ,",
        f"https://example.com/ext/other,{EXTENSION_URI}",
        f"https://example.com/a , {EXTENSION_URI} , https://example.com/b",
    ],
)
def test_extensions_activated(http, value):
    headers = {"A2A-Version": "1.0"}
    if value is not None:
        headers["A2A-Extensions"] = value
    response, payload = call(http, send_message(DEALER), headers)
    assert "result" in payload
    assert response.headers["A2A-Extensions"] == EXTENSION_URI


@pytest.mark.parametrize(
    "value",
    [
        "",
        "https://example.com/ext/other",
        "https://autoagentprotocol.org/extensions/aap/v3.0",
        EXTENSION_URI + "/",
        EXTENSION_URI.upper(),
        EXTENSION_URI + "x",
    ],
)
def test_extensions_missing_required_uri(http, value):
    response, payload = call(http, send_message(DEALER), {"A2A-Version": "1.0", "A2A-Extensions": value})
    assert assert_error_code(payload) == -32008
    message = payload["error"]["message"]
    assert EXTENSION_URI in message and "A2A-Extensions" in message
    info = payload["error"]["data"][0]
    assert info == {
        "@type": ERROR_INFO,
        "reason": "EXTENSION_SUPPORT_REQUIRED",
        "domain": "a2a-protocol.org",
        "metadata": {"extensionUri": EXTENSION_URI, "requiredHeader": "A2A-Extensions"},
    }
    assert "A2A-Extensions" not in response.headers


def test_version_checked_before_extensions(http):
    _, payload = call(http, send_message(DEALER), {"A2A-Version": "0.3", "A2A-Extensions": ""})
    assert assert_error_code(payload) == -32009


# -- envelope -------------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe{}", b'{"jsonrpc": "2.0", "id": 1,', b"[1, 2"])
def test_parse_error(http, raw):
    _, payload = call(http, None, raw=raw)
    assert payload["id"] is None
    assert assert_error_code(payload) == -32700
    assert "data" not in payload["error"]


def test_batch_rejected(http):
    _, payload = call(http, [send_message(DEALER), send_message(DEALER)])
    assert payload["id"] is None
    assert assert_error_code(payload) == -32600
    assert "batch" in payload["error"]["message"]


@pytest.mark.parametrize("raw", [b'"text"', b"42", b"null", b"true"])
def test_non_object_request(http, raw):
    _, payload = call(http, None, raw=raw)
    assert payload["id"] is None and assert_error_code(payload) == -32600


def test_envelope_problems_all_listed(http):
    _, payload = call(http, {"jsonrpc": "1.0", "id": "x", "method": 7, "params": "p"})
    assert payload["id"] == "x"
    assert assert_error_code(payload) == -32600
    fields = {v["field"] for v in detail_of(payload, BAD_REQUEST)["fieldViolations"]}
    assert fields == {"jsonrpc", "method", "params"}


@pytest.mark.parametrize("bad_id", [True, None, {"a": 1}, [1]])
def test_bad_id_answers_null(http, bad_id):
    body = send_message(DEALER)
    body["id"] = bad_id
    _, payload = call(http, body)
    assert payload["id"] is None and assert_error_code(payload) == -32600


def test_notification_rejected(http):
    body = send_message(DEALER)
    del body["id"]
    _, payload = call(http, body)
    assert payload["id"] is None and assert_error_code(payload) == -32600


# -- methods --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "method, code",
    [
        ("SendStreamingMessage", -32004),
        ("SubscribeToTask", -32004),
        ("GetExtendedAgentCard", -32004),
        ("CreateTaskPushNotificationConfig", -32003),
        ("GetTaskPushNotificationConfig", -32003),
        ("ListTaskPushNotificationConfigs", -32003),
        ("DeleteTaskPushNotificationConfig", -32003),
        ("GetTask", -32001),
        ("CancelTask", -32001),
    ],
)
def test_a2a_methods_not_served(http, method, code):
    _, payload = call(http, {"jsonrpc": "2.0", "id": 9, "method": method, "params": {"id": "task-1"}})
    assert payload["id"] == 9
    assert assert_error_code(payload) == code
    assert payload["error"]["data"][0]["@type"] == ERROR_INFO
    assert payload["error"]["data"][0]["domain"] == "a2a-protocol.org"


@pytest.mark.parametrize("method", ["message/send", "tasks/get", "sendMessage", "Foo", ""])
def test_unknown_method(http, method):
    _, payload = call(http, {"jsonrpc": "2.0", "id": 1, "method": method, "params": {}})
    assert assert_error_code(payload) == -32601
    assert "data" not in payload["error"]


# -- params ------------------------------------------------------------------------------------
def invalid_params_fields(payload) -> set[str]:
    assert assert_error_code(payload) == -32602
    assert detail_of(payload, ERROR_INFO)["reason"] == "INVALID_PARAMS"
    return {v["field"] for v in detail_of(payload, BAD_REQUEST)["fieldViolations"]}


def test_params_missing(http):
    _, payload = call(http, {"jsonrpc": "2.0", "id": 1, "method": "SendMessage"})
    assert invalid_params_fields(payload) == {"params"}


def test_every_params_problem_listed(http):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_AGENT", "contextId": 5, "parts": [{"data": [1, 2], "mediaType": 3}]},
            "configuration": {"acceptedOutputModes": "application/json"},
        },
    }
    _, payload = call(http, body)
    assert invalid_params_fields(payload) == {
        "message.messageId",
        "message.role",
        "message.contextId",
        "message.parts[0].mediaType",
        "message.parts[0].data",
        "configuration.acceptedOutputModes",
    }


@pytest.mark.parametrize(
    "parts, field",
    [
        ([], "message.parts"),
        (None, "message.parts"),
        ([{"data": DEALER}, {"data": DEALER}], "message.parts"),
        (["x"], "message.parts[0]"),
        ([{"mediaType": DEALER_REQ}], "message.parts[0].data"),
        ([{"data": "dealer.information.request"}], "message.parts[0].data"),
    ],
)
def test_bad_parts(http, parts, field):
    body = send_message(DEALER)
    body["params"]["message"]["parts"] = parts
    _, payload = call(http, body)
    assert invalid_params_fields(payload) == {field}


def test_message_missing(http):
    _, payload = call(http, {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}})
    assert invalid_params_fields(payload) == {"message"}


def test_task_id_is_task_not_found(http):
    body = send_message(DEALER)
    body["params"]["message"]["taskId"] = "task-77"
    _, payload = call(http, body)
    assert assert_error_code(payload) == -32001
    assert detail_of(payload, ERROR_INFO)["reason"] == "TASK_NOT_FOUND"


def test_push_config_in_send_message(http):
    body = send_message(DEALER)
    body["params"]["configuration"]["taskPushNotificationConfig"] = {"url": "https://buyer.example/hook"}
    _, payload = call(http, body)
    assert assert_error_code(payload) == -32003


def test_prose_is_a_content_type_error_that_shows_what_to_send(http):
    body = send_message(DEALER)
    body["params"]["message"]["parts"] = [{"text": "show me SUVs", "mediaType": "text/plain"}]
    _, payload = call(http, body)
    assert assert_error_code(payload) == -32005
    info = detail_of(payload, ERROR_INFO)
    assert info["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    assert "inventory.search.request" in payload["error"]["message"]  # an example request
    assert "dealer.information.request" in info["metadata"]["requestTypes"]
    assert json.loads(info["metadata"]["example"])["type"] == "inventory.search.request"


@pytest.mark.parametrize(
    "part",
    [
        {"text": json.dumps(DEALER)},
        {"text": " " + json.dumps(DEALER), "mediaType": "text/plain"},
        {"text": json.dumps(DEALER), "mediaType": "application/json"},
        {"text": json.dumps(DEALER), "mediaType": "application/vnd.autoagent.dealer-information-request+json"},
        {"raw": base64.b64encode(json.dumps(DEALER).encode()).decode(), "mediaType": "application/json"},
    ],
)
def test_a_request_as_json_text_is_answered_like_a_data_part(http, part):
    body = send_message(DEALER)
    body["params"]["message"]["parts"] = [part]
    _, payload = call(http, body)
    assert "error" not in payload, payload
    (answer,) = payload["result"]["message"]["parts"]
    assert answer["data"]["type"] == "dealer.information.response"


def test_list_tasks_answers_an_empty_page(http):
    """A2A v1.0 ListTasksResponse, not the seed's SendMessage result (docs/a2a.md, "Methods")."""
    for params, size in (({"pageSize": 10, "contextId": "c-1"}, 10), (None, 50)):
        body = {"jsonrpc": "2.0", "id": 4, "method": "ListTasks", **({"params": params} if params else {})}
        response = http.post("/a2a", json=body, headers=AAP_HEADERS)
        assert response.status_code == 200
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": 4,
            "result": {"tasks": [], "nextPageToken": "", "pageSize": size, "totalSize": 0},
        }


def test_list_tasks_checks_its_parameters(http):
    params = {"pageSize": 0, "status": "done", "pageToken": "abc", "includeArtifacts": "yes"}
    _, payload = call(http, {"jsonrpc": "2.0", "id": 6, "method": "ListTasks", "params": params})
    assert assert_error_code(payload) == -32602
    for name in ("pageSize", "status", "pageToken", "includeArtifacts"):
        assert name in payload["error"]["message"]


def test_snake_case_fields_accepted(http):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "message_id": str(uuid.uuid4()),
                "context_id": "ctx-snake",
                "role": "ROLE_USER",
                "parts": [{"data": DEALER, "media_type": DEALER_REQ}],
            },
            "configuration": {"accepted_output_modes": [DEALER_RESP]},
        },
    }
    _, payload = call(http, body)
    assert payload["result"]["message"]["contextId"] == "ctx-snake"


# -- media types and output modes ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "media_type",
    [None, "", DEALER_REQ, DEALER_REQ.upper(), DEALER_REQ + "; charset=utf-8"],
)
def test_request_media_type_accepted(http, media_type):
    _, payload = call(http, send_message(DEALER, media_type=media_type))
    assert "result" in payload


@pytest.mark.parametrize(
    "media_type",
    ["application/json", "text/plain", SEARCH_REQ, "application/vnd.autoagent.dealer-information-response+json"],
)
def test_request_media_type_rejected(http, media_type):
    _, payload = call(http, send_message(DEALER, media_type=media_type))
    assert assert_error_code(payload) == -32005


@pytest.mark.parametrize(
    "accepted",
    [
        None,
        [],
        [DEALER_RESP],
        ["text/plain", DEALER_RESP],
        ["application/json"],
        ["*/*"],
        ["application/*"],
        [DEALER_RESP.upper() + "; q=1"],
    ],
)
def test_output_modes_accepted(http, accepted):
    _, payload = call(http, send_message(DEALER, accepted=accepted))
    assert payload["result"]["message"]["parts"][0]["mediaType"] == DEALER_RESP


@pytest.mark.parametrize(
    "accepted",
    [["text/plain"], ["text/*", "image/png"], ["application/vnd.autoagent.inventory-search-response+json"]],
)
def test_output_modes_unmeetable(http, accepted):
    _, payload = call(http, send_message(DEALER, accepted=accepted))
    assert assert_error_code(payload) == -32005
    assert detail_of(payload, ERROR_INFO)["metadata"]["responseMediaType"] == DEALER_RESP


# -- AAP skill errors -----------------------------------------------------------------------------
def aap_failure(payload, code: str, rpc_code: int) -> dict:
    assert assert_error_code(payload) == rpc_code
    err = aap_error_of(payload)
    assert err is not None and err["code"] == code
    assert payload["error"]["message"] == err["message"]
    return err


def test_unknown_skill(http):
    _, payload = call(http, send_message({"type": "garage.booking.request"}))
    aap_failure(payload, "UNSUPPORTED_SKILL", -32004)


@pytest.mark.parametrize("data", [{}, {"type": 5}, {"kind": "dealer.information.request"}])
def test_missing_or_malformed_type(http, data):
    _, payload = call(http, send_message(data))
    aap_failure(payload, "SCHEMA_VALIDATION_FAILED", -32602)


def locations(err: dict) -> set[str]:
    return {e["instanceLocation"] for e in err["details"]["errors"]}


def test_wrong_types_all_listed(http):
    data = {
        "type": "inventory.search.request",
        "filters": {"year_min": "2020", "make": "Honda", "price_max": -5},
        "pagination": {"limit": "ten"},
    }
    _, payload = call(http, send_message(data))
    err = aap_failure(payload, "SCHEMA_VALIDATION_FAILED", -32602)
    assert {"/filters/year_min", "/filters/make", "/filters/price_max", "/pagination/limit"} <= locations(err)
    fields = {v["field"] for v in detail_of(payload, BAD_REQUEST)["fieldViolations"]}
    assert "message.parts[0].data.pagination.limit" in fields
    assert "message.parts[0].data.filters.year_min" in fields


def test_unknown_filter_keys(http):
    data = {"type": "inventory.search.request", "filters": {"colour": ["red"], "wheels": 4}}
    _, payload = call(http, send_message(data))
    err = aap_failure(payload, "SCHEMA_VALIDATION_FAILED", -32602)
    assert err["details"]["errors"]
    assert "red" not in payload["error"]["message"]


def test_inverted_ranges(http):
    data = {
        "type": "inventory.search.request",
        "filters": {"year_min": 2024, "year_max": 2020, "price_min": 50000, "price_max": 10000},
    }
    _, payload = call(http, send_message(data))
    err = aap_failure(payload, "SCHEMA_VALIDATION_FAILED", -32602)
    assert len(err["details"]["errors"]) >= 2


def test_empty_arrays(http):
    data = {"type": "inventory.search.request", "filters": {"make": [], "condition": []}}
    _, payload = call(http, send_message(data))
    err = aap_failure(payload, "SCHEMA_VALIDATION_FAILED", -32602)
    assert {"/filters/make", "/filters/condition"} <= locations(err)


def test_tampered_cursor(http):
    data = {"type": "inventory.search.request", "pagination": {"limit": 2}}
    _, first = call(http, send_message(data))
    cursor = first["result"]["message"]["parts"][0]["data"]["data"]["next_cursor"]
    assert cursor
    tampered = cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")
    data["pagination"]["cursor"] = tampered
    _, payload = call(http, send_message(data))
    aap_failure(payload, "INVALID_CURSOR", -32602)


def test_vehicle_not_found(http):
    data = {"type": "inventory.vehicle.request", "vin": "1HGCV1F30NA000000"}
    _, payload = call(http, send_message(data))
    err = aap_failure(payload, "VEHICLE_NOT_FOUND", -32000)
    assert err["retryable"] is False
    assert detail_of(payload, ERROR_INFO)["metadata"]["retryable"] == "false"


def test_limit_above_max_rejected_not_clamped(http, deployment):
    data = {"type": "inventory.search.request", "pagination": {"limit": deployment.settings.search.max_limit + 1}}
    _, payload = call(http, send_message(data))
    assert assert_error_code(payload) == -32602


def test_integral_floats_from_sdk_clients(http):
    """Protobuf-Value clients send 2.0 for 2; the answer keeps JSON integers."""
    data = {"type": "inventory.search.request", "pagination": {"limit": 2.0}, "filters": {"year_min": 1990.0}}
    response, payload = call(http, send_message(data))
    result = payload["result"]["message"]["parts"][0]["data"]["data"]
    assert result["limit"] == 2 and isinstance(result["limit"], int)
    assert '"limit":2,' in response.text or '"limit":2}' in response.text
    for vehicle in result["vehicles"]:
        if "price" in vehicle:
            assert isinstance(vehicle["price"], int)


# -- never a 500: random input -------------------------------------------------------------------
KNOWN_CODES = {-32700, -32600, -32601, -32602, -32603, -32000, -32001, -32003, -32004, -32005}
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=16,
)
SEARCH_KEYS = st.sampled_from(["filters", "pagination", "sort", "currency", "mileage_unit", "query", "privacy", "x"])
FILTER_KEYS = st.sampled_from(
    ["make", "year_min", "year_max", "price_max", "near", "features_all", "vin", "status", "q"]
)
TYPES = st.sampled_from(
    [
        "dealer.information.request",
        "inventory.facets.request",
        "inventory.search.request",
        "inventory.vehicle.request",
        "lead.submit.request",
        "nope.request",
    ]
)


def assert_sane(payload) -> None:
    if "error" in payload:
        assert payload["error"]["code"] in KNOWN_CODES, payload
        assert payload["error"]["code"] != -32603, payload  # random input is never an internal error


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=TYPES,
    top=st.dictionaries(SEARCH_KEYS, JSON, max_size=4),
    filters=st.dictionaries(FILTER_KEYS, JSON, max_size=4),
)
def test_random_payloads_never_fail_the_server(http, kind, top, filters):
    data = {"type": kind, **top}
    if filters:
        data["filters"] = filters
    _, payload = call(http, send_message(data, media_type=None, accepted=None))
    assert_sane(payload)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=JSON, params=st.dictionaries(st.sampled_from(["message", "configuration", "tenant", "metadata"]), JSON))
def test_random_envelopes_never_fail_the_server(http, body, params):
    _, payload = call(http, body)
    assert_sane(payload)
    _, payload = call(http, {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params})
    assert_sane(payload)


def test_pointer_to_field():
    from aap.bindings.jsonrpc import pointer_to_field

    prefix = "message.parts[0].data"
    assert pointer_to_field("", prefix) == prefix
    assert pointer_to_field("/filters/make/0", prefix) == prefix + ".filters.make[0]"
    assert pointer_to_field("/a~1b/c~0d", prefix) == prefix + ".a/b.c~d"
