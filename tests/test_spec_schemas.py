"""The per-component schema files, the standalone seeds and the local registry."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing.exceptions import Unresolvable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import aap.spec as spec  # noqa: E402
import schema_split  # noqa: E402
from aap import SCHEMA_BASE_URL  # noqa: E402
from aap.spec import schema_files  # noqa: E402

SCHEMAS = ROOT / "src" / "aap" / "spec" / "schemas"
SEEDS = ROOT / "tools" / "seeds"


def test_files_are_in_sync_with_the_openapi_document():
    expected = schema_split.expected_files()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in SCHEMAS.glob("*.schema.json")}
    assert sorted(on_disk) == sorted(expected)
    for name, text in expected.items():
        assert on_disk[name] == text, name


@pytest.mark.parametrize(
    "component,stem",
    [
        ("InventorySearchRequest", "inventory-search-request"),
        ("VehicleDetailRequest", "vehicle-detail-request"),
        ("AapExtensionParams", "aap-extension-params"),
        ("JsonRpcResponse", "json-rpc-response"),
        ("A2aMessage", "a2a-message"),
        ("A2aDataPart", "a2a-data-part"),
        ("PoppyOauthMetadata", "poppy-oauth-metadata"),
        ("PoppyMcpResourceMetadata", "poppy-mcp-resource-metadata"),
        ("McpEndpoint", "mcp-endpoint"),
        ("AgentCard", "agent-card-component"),
    ],
)
def test_component_file_stems(component, stem):
    assert schema_split.component_stem(component) == stem
    assert stem in spec.schema_names()


SEED_README_COMPONENTS = """
    Vehicle VehicleFeature InventoryListing InventorySearchRequest InventorySearchResponse
    InventoryFacetsRequest InventoryFacetsResponse Facets InventoryCapabilities
    VehicleDetailRequest VehicleDetailResponse DealerInformation DealerInformationRequest
    DealerInformationResponse Customer ConsentGrant Appointment LeadSubmitRequest
    LeadSubmitResponse Error Event AgentCard AapExtensionParams McpEndpoint Currency
    MileageUnit DealerFee Address AapMessage JsonRpcRequest JsonRpcResponse JsonRpcError
    A2aMessage A2aDataPart PoppyDocument Poppy PoppyAapExtension PoppyOauthMetadata
    PoppyMcpResourceMetadata PoppyClientMetadata PoppyClientAssertion PoppySessionAssertion
    PoppySessionRequest PoppySessionToken PoppyGuestTokenResponse PoppyTokenExchangeRequest
    PoppyTokenExchangeResponse PoppyBrowserSessionRequest PoppyFeedbackRequest
    PoppyExcludedTasks PoppyAlternative""".split()


def test_every_component_has_a_file():
    components = spec.openapi_document()["components"]["schemas"]
    assert sorted(components) == sorted(SEED_README_COMPONENTS)
    for name in components:
        assert schema_split.component_stem(name) in spec.schema_names()
    assert len(spec.schema_names()) == len(components) + 3


def test_skill_schema_urls_advertised_by_the_seed_exist():
    params = spec.schema("aap-extension-params")["properties"]["skills"]["properties"]
    for skill in params.values():
        for key in ("request_schema", "response_schema"):
            url = skill["properties"][key]["const"]
            stem = url.removeprefix(SCHEMA_BASE_URL).removesuffix(".schema.json")
            assert spec.schema_url(stem) == url


def test_ids_and_dialect():
    for stem in spec.schema_names():
        doc = spec.schema(stem)
        assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        if stem.endswith(("-v3.0", "-v3.2")):
            assert not doc["$id"].startswith(SCHEMA_BASE_URL)
        else:
            assert doc["$id"] == f"{SCHEMA_BASE_URL}{stem}.schema.json"
        Draft202012Validator.check_schema(doc)


def test_standalone_seeds_ship_verbatim():
    assert (SCHEMAS / "agent-card.schema.json").read_bytes() == (SEEDS / "001_3b6c1b248c9a63be.txt").read_bytes()
    assert (SCHEMAS / "poppy-alternative-v3.0.schema.json").read_bytes() == (
        SEEDS / "000_e377c48ef45a2838.txt"
    ).read_bytes()
    assert (SCHEMAS / "poppy-session-jwt-v3.2.schema.json").read_bytes() == (
        SEEDS / "003_6f7ce1aa19fe78ba.txt"
    ).read_bytes()
    assert spec.schema_url("poppy-alternative-v3.0") == (
        "https://autoagentprotocol.org/v3.0/schemas/poppy-alternative.schema.json"
    )
    assert spec.schema_url("poppy-session-jwt-v3.2") == (
        "https://autoagentprotocol.org/v3.2/schemas/poppy-session-jwt.schema.json"
    )


def test_refs_between_files_are_relative():
    listing = spec.schema("inventory-listing")
    assert listing["allOf"] == [{"$ref": "vehicle.schema.json"}]
    assert listing["properties"]["status"] == {"$ref": "vehicle.schema.json#/properties/status"}
    response = spec.schema("inventory-search-response")
    mileage = response["properties"]["data"]["dependentSchemas"]["mileage_unit"]
    assert mileage == {"$ref": "#/properties/data/dependentSchemas/currency"}
    text = "".join(p.read_text(encoding="utf-8") for p in SCHEMAS.glob("*.schema.json"))
    assert "#/components/schemas" not in text


def _refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for v in node.values():
            yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def test_every_ref_resolves_locally():
    reg = schema_files.registry()
    count = 0
    for stem in spec.schema_names():
        doc = spec.schema(stem)
        resolver = reg.resolver(doc["$id"])
        for ref in _refs(doc):
            resolver.lookup(ref)
            count += 1
    assert count > 90


def test_registry_knows_ids_and_file_names():
    reg = schema_files.registry()
    by_id = reg.resolver().lookup(SCHEMA_BASE_URL + "vehicle.schema.json").contents
    by_name = reg.resolver().lookup("vehicle.schema.json").contents
    assert by_id is by_name
    assert reg.resolver().lookup("vehicle.schema.json#/properties/vin").contents["pattern"]


def test_registry_never_fetches():
    with pytest.raises(Unresolvable):
        schema_files.registry().resolver().lookup("https://autoagentprotocol.org/v3.1/schemas/x.json")
    validator = Draft202012Validator(
        {"$ref": "https://example.com/remote.schema.json"}, registry=schema_files.registry()
    )
    with pytest.raises(Unresolvable):
        validator.validate({})


def _with_examples(node, pointer=""):
    if isinstance(node, dict):
        if isinstance(node.get("examples"), list):
            yield pointer, node
        for k, v in node.items():
            if k not in ("examples", "enum", "const", "default"):
                yield from _with_examples(v, f"{pointer}/{k.replace('~', '~0').replace('/', '~1')}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _with_examples(v, f"{pointer}/{i}")


def test_component_examples_validate_through_the_split_files():
    whole = 0
    for stem in spec.schema_names():
        for example in spec.schema(stem).get("examples", []):
            assert spec.validate(example, stem) == [], stem
            whole += 1
    assert whole == 10
    nested = 0
    for stem in spec.schema_names():
        doc = spec.schema(stem)
        for pointer, sub in _with_examples(doc):
            if not pointer:
                continue
            v = Draft202012Validator(
                {"$ref": doc["$id"] + "#" + pointer},
                registry=schema_files.registry(),
                format_checker=Draft202012Validator.FORMAT_CHECKER,
            )
            for example in sub["examples"]:
                assert not list(v.iter_errors(example)), (stem, pointer)
                nested += 1
    assert nested > 150


def test_send_message_request_examples_validate():
    operation = spec.openapi_document()["paths"]["/"]["post"]
    examples = operation["requestBody"]["content"]["application/json"]["examples"]
    by_type = {
        spec.schema(s)["properties"]["type"].get("const"): s
        for s in spec.schema_names()
        if "type" in spec.schema(s).get("properties", {})
    }
    for name, example in examples.items():
        value = example["value"]
        assert spec.validate(value, "json-rpc-request") == [], name
        (part,) = value["params"]["message"]["parts"]
        data = part["data"]
        assert data["type"] == f"{name}.request"
        assert spec.validate(data, by_type[data["type"]]) == [], name
        assert part["mediaType"] == (f"application/vnd.autoagent.{by_type[data['type']]}+json")
    assert len(examples) == 5


def test_public_accessors_return_copies():
    a = spec.schema("vehicle")
    a["title"] = "changed"
    assert spec.schema("vehicle")["title"] == "Vehicle"
    doc = spec.openapi_document()
    doc["openapi"] = "0"
    assert spec.openapi_document()["openapi"] == "3.1.0"
    assert json.loads(spec.schema_bytes("vehicle")) == spec.schema("vehicle")
    assert spec.schema_bytes("agent-card") == (SCHEMAS / "agent-card.schema.json").read_bytes()
    assert spec.schema_names() == sorted(spec.schema_names())


def test_unknown_schema_names_are_refused():
    for call in (
        spec.schema,
        spec.schema_url,
        spec.schema_bytes,
        lambda n: spec.validate({}, n),
        lambda n: spec.is_valid({}, n),
    ):
        with pytest.raises(spec.UnknownSchema):
            call("no-such-schema")
