"""The rebuilt OpenAPI document is a faithful reading of the flattened seed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import seed_rebuild as sr  # noqa: E402
from aap.spec.formats import checker as format_checker  # noqa: E402

OPENAPI_PATH = ROOT / "src" / "aap" / "spec" / "schemas" / "openapi-jsonrpc.json"
SEED_TEXT = sr.SEED.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def document() -> dict:
    return json.loads(OPENAPI_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def registry(document) -> Registry:
    return Registry().with_resource(
        "urn:aap:openapi", Resource.from_contents(document, default_specification=DRAFT202012)
    )


def _validator(registry: Registry, pointer: str) -> Draft202012Validator:
    return Draft202012Validator(
        {"$ref": "urn:aap:openapi#" + pointer}, registry=registry, format_checker=format_checker
    )


# -------------------------------------------------------------- schema walking

SUBSCHEMA = (
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")


def walk_schemas(schema, path):
    """Every schema object reachable through applicator keywords (not into data)."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for k in SUBSCHEMA:
        if k in schema:
            yield from walk_schemas(schema[k], path + (k,))
    for k in SUBSCHEMA_LISTS:
        for i, sub in enumerate(schema.get(k, [])):
            yield from walk_schemas(sub, path + (k, i))
    for k in SUBSCHEMA_MAPS:
        for name, sub in schema.get(k, {}).items():
            yield from walk_schemas(sub, path + (k, name))


def all_schemas(document):
    for name, schema in document["components"]["schemas"].items():
        yield from walk_schemas(schema, ("components", "schemas", name))
    for method in document["paths"]["/"].values():
        for i, param in enumerate(method.get("parameters", [])):
            yield from walk_schemas(param["schema"], ("paths", "/", "post", "parameters", i, "schema"))


def ptr(path) -> str:
    return sr.pointer(tuple(path))


# ------------------------------------------------------------------ round trip


def test_reflattening_reproduces_the_seed_byte_for_byte(document):
    assert sr.reflatten(document) == SEED_TEXT


def test_reflattening_gives_the_seed_token_sequence(document):
    def tokens(text):
        return [
            (ln.dashes, ln.key, None if ln.scalar is None else (type(ln.scalar.value).__name__, ln.scalar.value))
            for ln in sr.tokenize(text)
        ]

    assert tokens(sr.reflatten(document)) == tokens(SEED_TEXT)


@pytest.mark.slow
def test_committed_json_is_the_tools_output(document):
    assert sr.render(sr.rebuild()) == OPENAPI_PATH.read_text(encoding="utf-8")


def test_every_seed_key_survives_once(document):
    """No duplicate keys: each key line of the seed became exactly one JSON member."""

    def count(node):
        if isinstance(node, dict):
            return len(node) + sum(count(v) for v in node.values())
        if isinstance(node, list):
            return sum(count(v) for v in node)
        return 0

    keys = sum(1 for ln in sr.tokenize(SEED_TEXT) if ln.key is not None)
    assert count(document) == keys


# -------------------------------------------------------------------- examples


def test_every_schema_examples_entry_validates(document, registry):
    checked = 0
    for path, schema in all_schemas(document):
        for i, example in enumerate(schema.get("examples", [])):
            errors = list(_validator(registry, ptr(path)).iter_errors(example))
            assert not errors, (ptr(path), i, [e.message for e in errors])
            checked += 1
    assert checked > 150


def test_defaults_validate(document, registry):
    checked = 0
    for path, schema in all_schemas(document):
        if "default" in schema:
            assert _validator(registry, ptr(path)).is_valid(schema["default"]), ptr(path)
            checked += 1
    assert checked >= 10


def test_path_examples_validate_against_their_media_type_schema(document, registry):
    """Request and response examples of the operation (the seed has request ones only)."""
    operation = document["paths"]["/"]["post"]
    bodies = [("requestBody",), *[("responses", code) for code in operation["responses"]]]
    checked = []
    for body in bodies:
        node = operation
        for p in body:
            node = node[p]
        for media, mt in node.get("content", {}).items():
            for name, example in mt.get("examples", {}).items():
                pointer = ptr(("paths", "/", "post", *body, "content", media, "schema"))
                errors = list(_validator(registry, pointer).iter_errors(example["value"]))
                assert not errors, (body, name, [e.message for e in errors])
                checked.append((body, name))
    assert [name for _body, name in checked] == [
        "dealer.information",
        "inventory.facets",
        "inventory.search",
        "inventory.vehicle",
        "lead.submit",
    ]


# ------------------------------------------------------------ schema validity


def test_every_ref_resolves(document, registry):
    resolver = registry.resolver("urn:aap:openapi")
    refs = 0
    for path, schema in all_schemas(document):
        if "$ref" in schema:
            resolved = resolver.lookup(schema["$ref"]).contents
            assert isinstance(resolved, (dict, bool)), ptr(path)
            refs += 1
    assert refs > 80


def test_components_are_valid_2020_12_schemas(document):
    for schema in document["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)


def test_no_keyword_outside_its_type(document):
    """Object-only keywords never sit in a scalar-typed schema (and so on), then/else
    have an if, additionalProperties: false has properties to allow."""
    for path, schema in all_schemas(document):
        assert sr.schema_problems(schema) == [], ptr(path)


def test_boolean_schemas_are_only_forbidden_properties(document):
    for path, schema in all_schemas(document):
        for k in ("properties",):
            for name, sub in schema.get(k, {}).items():
                if isinstance(sub, bool):
                    assert sub is False, ptr(path + (k, name))


def test_scalar_typing_follows_yaml_1_2_core(document):
    comps = document["components"]["schemas"]
    assert comps["Address"]["examples"][0]["zip"] == "94103"  # quoted
    assert comps["Address"]["properties"]["zip"]["examples"] == ["94103", "94103-1234"]
    assert comps["Customer"]["properties"]["phone"]["examples"] == ["+14155550123"]
    assert comps["JsonRpcRequest"]["properties"]["jsonrpc"]["const"] == "2.0"
    assert comps["PoppyDocument"]["properties"]["protocol_version"]["const"] == "0.3"
    assert comps["Vehicle"]["properties"]["year"]["examples"] == [2024]  # int
    assert comps["Vehicle"]["properties"]["battery_kwh"]["examples"] == [10.5, 15.4]
    assert comps["Vehicle"]["examples"][1]["other_attributes"]["abs"] is True
    assert comps["Vehicle"]["properties"]["rooftop"]["type"] == ["string", "null"]
    assert comps["Vehicle"]["properties"]["updated_at"]["examples"] == ["2026-04-30T08:42:00Z"]
    assert comps["McpEndpoint"]["properties"]["protocol_versions"]["allOf"][0] == {
        "contains": {"const": "2026-07-28"}
    }  # no timestamps
    assert comps["DealerInformation"]["$defs"]["day_hours"]["oneOf"][0]["properties"]["open"]["examples"] == [
        "09:00"
    ]  # no sexagesimal
    assert comps["AapExtensionParams"]["properties"]["version"]["const"] == "3.1.0"


@pytest.mark.parametrize(
    "text,value",
    [
        ("null", None),
        ("~", None),
        ('"null"', "null"),
        ("true", True),
        ("False", False),
        ("2024", 2024),
        ("-96.797", -96.797),
        ("10.5", 10.5),
        ('"2.0"', "2.0"),
        ("1e3", 1000.0),
        ("2026-04-30T11:05:00Z", "2026-04-30T11:05:00Z"),
        ("3.1.0", "3.1.0"),
        ("09:00", "09:00"),
        ('"+14155550123"', "+14155550123"),
        ("0x1F", 31),
        ("0o17", 15),
        ("[]", []),
    ],
)
def test_scalar_resolution(text, value):
    (line,) = sr.tokenize(f"k: {text}")
    assert line.scalar.value == value
    assert type(line.scalar.value) is type(value)


# ------------------------------------------------------------------ tokenizer


def test_quoted_scalars_may_contain_key_and_dash_lookalikes():
    lines = sr.tokenize('a: "x: y - z" b: - "c: d" - e f: g')
    assert [(ln.dashes, ln.key, ln.scalar and ln.scalar.value) for ln in lines] == [
        (0, "a", "x: y - z"),
        (0, "b", None),
        (1, None, "c: d"),
        (1, None, "e"),
        (0, "f", "g"),
    ]


def test_quoted_keys():
    lines = sr.tokenize('"200": description: ok "@type": x')
    assert [(ln.key, ln.scalar and ln.scalar.value) for ln in lines] == [
        ("200", None),
        ("description", "ok"),
        ("@type", "x"),
    ]


def test_plain_scalars_keep_inner_quotes_and_brackets():
    (line,) = sr.tokenize("description: scope MUST be [\"lead_submission\"] (e.g. 'x').")
    assert line.scalar.value == "scope MUST be [\"lead_submission\"] (e.g. 'x')."


# ------------------------------------------------ nesting chosen by validation

MINI = (
    "openapi: 3.1.0 info: title: t version: 1.0.0 paths: {} components: schemas: "
    "Thing: type: object properties: a: type: object properties: b: type: string "
    "additionalProperties: false c: type: string additionalProperties: false "
    "examples: - a: b: x c: y description: A thing."
)


def test_example_nesting_follows_its_schema():
    """`c: y` could continue the object under `a`; `a` forbids it, so it is top level,
    and `description` is the schema's, not the example's."""
    thing = sr.rebuild(MINI)["components"]["schemas"]["Thing"]
    assert thing["examples"] == [{"a": {"b": "x"}, "c": "y"}]
    assert thing["description"] == "A thing."
    assert thing["properties"]["a"]["additionalProperties"] is False


def test_keywords_follow_the_schema_type():
    text = (
        "openapi: 3.1.0 info: title: t version: 1.0.0 paths: {} components: schemas: "
        "Tags: type: array items: type: string minLength: 1 minItems: 1 "
        "description: Tags. uniqueItems: true"
    )
    tags = sr.rebuild(text)["components"]["schemas"]["Tags"]
    assert tags == {
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "minItems": 1,
        "description": "Tags.",
        "uniqueItems": True,
    }


def test_required_goes_to_the_schema_that_declares_the_names():
    text = (
        "openapi: 3.1.0 info: title: t version: 1.0.0 paths: {} components: schemas: "
        "Ext: type: object properties: uri: type: string params: type: object "
        "required: - uri"
    )
    ext = sr.rebuild(text)["components"]["schemas"]["Ext"]
    assert ext["required"] == ["uri"]
    assert ext["properties"]["params"] == {"type": "object"}


# --------------------------------------------------- the standalone agent card


def test_agent_card_component_differs_from_seed_001_only_as_reported(document):
    seed = json.loads((sr.ROOT / "tools" / "seeds" / "001_3b6c1b248c9a63be.txt").read_text())
    component = json.loads(json.dumps(document["components"]["schemas"]["AgentCard"]))
    # refs: the component points into the OpenAPI document, the file at sibling files
    card_props = component["properties"]
    ext = card_props["capabilities"]["properties"]["extensions"]
    assert ext["items"]["$ref"] == "#/components/schemas/AgentCard/$defs/extension"
    assert ext["contains"]["properties"]["params"]["$ref"] == ("#/components/schemas/AapExtensionParams")
    assert card_props["skills"]["items"]["$ref"] == "#/components/schemas/AgentCard/$defs/skill"
    ext["items"]["$ref"] = "#/$defs/extension"
    ext["contains"]["properties"]["params"]["$ref"] = "./aap-extension-params.schema.json"
    card_props["skills"]["items"]["$ref"] = "#/$defs/skill"
    # the seed OpenAPI lost the `<id>` placeholder in the skill description
    assert 'params.skills[""].request_schema' in component["$defs"]["skill"]["description"]
    assert 'params.skills["<id>"].request_schema' in seed["$defs"]["skill"]["description"]
    component["$defs"]["skill"]["description"] = seed["$defs"]["skill"]["description"]
    expected = {k: v for k, v in seed.items() if k not in ("$schema", "$id")}
    assert component == expected


def test_poppy_alternative_component_matches_seed_000_structure(document):
    seed = json.loads((sr.ROOT / "tools" / "seeds" / "000_e377c48ef45a2838.txt").read_text())
    component = json.loads(json.dumps(document["components"]["schemas"]["PoppyAlternative"]))
    component["properties"]["references"]["items"]["$ref"] = "#/$defs/reference"
    assert component == {k: v for k, v in seed.items() if k not in ("$schema", "$id")}


def test_overrides_are_all_used():
    parser = sr.Parser(sr.tokenize(SEED_TEXT), previous=json.loads(OPENAPI_PATH.read_text(encoding="utf-8")))
    parser.parse()
    assert parser.used_overrides == set(sr.OVERRIDES)
