"""Each tool's outputSchema accepts its response and aap.error, read as draft-07 or 2020-12 alike.

The TypeScript SDK 1.x validates the structuredContent of every result, isError ones
included, with Ajv in draft-07 mode (``$schema`` ignored); the Python SDK validates only
successes, with 2020-12. Verdicts are compared over real answers and broken variants of them
(tests/schema_corpus.py): the published schema must accept exactly what the response schema
or the error schema accepts, draft-07 must agree with 2020-12, and success-shaped instances
must get the response schema's verdict. tests/test_mcp_node.py repeats the comparison with
Ajv itself.
"""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft7Validator, Draft202012Validator
from referencing import Registry

from aap.bindings.mcp import schemas
from aap.bindings.mcp.schemas import bundled, output_schema, portable
from aap.skills.catalog import SKILLS
from aap.spec import validate
from aap.spec.formats import checker as format_checker
from aap.spec.validator import AapValidator
from schema_corpus import JUNK, corpus, real_messages

SKILL_IDS = list(SKILLS)


@pytest.fixture(scope="module")
def messages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    return real_messages(tmp_path_factory.mktemp("schema-corpus"))


@pytest.fixture(scope="module")
def instances(messages: dict[str, list[Any]]) -> dict[str, list[tuple[str, Any]]]:
    return corpus(messages)


def without_dialect(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != "$schema"}


def readers(schema: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(the project's 2020-12 reading with formats, plain 2020-12, draft-07 as Ajv reads it)."""
    bare = without_dialect(schema)
    return (
        AapValidator(bare, registry=Registry(), format_checker=format_checker),
        Draft202012Validator(bare, registry=Registry()),
        Draft7Validator(bare, registry=Registry()),
    )


@pytest.mark.parametrize("skill_id", SKILL_IDS)
def test_the_output_schema_is_an_object_schema_of_response_or_error(skill_id: str) -> None:
    skill = SKILLS[skill_id]
    schema = output_schema(skill.response_schema)
    Draft202012Validator.check_schema(schema)
    Draft7Validator.check_schema(without_dialect(schema))
    assert schema["type"] == "object"  # MCP 2025-11-25: outputSchema root is type object
    assert schema["anyOf"] == [{"$ref": f"#/$defs/{skill.response_schema}"}, {"$ref": "#/$defs/error"}]


@pytest.mark.slow
@pytest.mark.parametrize("skill_id", SKILL_IDS)
def test_verdicts_agree_over_real_answers_and_broken_variants(
    skill_id: str, instances: dict[str, list[tuple[str, Any]]]
) -> None:
    skill = SKILLS[skill_id]
    published, plain_2020, draft_07 = readers(output_schema(skill.response_schema))
    verdicts = []
    for label, instance in instances[skill_id]:
        as_response = validate(instance, skill.response_schema) == []
        as_error = validate(instance, "error") == []
        verdict = published.is_valid(instance)
        assert verdict == (as_response or as_error), label
        assert draft_07.is_valid(instance) == plain_2020.is_valid(instance), label
        if isinstance(instance, dict) and instance.get("type") == skill.response_type:
            assert verdict == as_response, label  # what the success schema enforced still holds
        verdicts.append(verdict)
    assert verdicts.count(True) >= 5 and verdicts.count(False) >= 40, (verdicts.count(True), verdicts.count(False))
    for junk in JUNK:
        assert not published.is_valid(junk) and not draft_07.is_valid(junk), junk


def test_every_real_answer_and_error_is_accepted_by_its_tool(messages: dict[str, list[Any]]) -> None:
    for skill_id, skill in SKILLS.items():
        published, _, draft_07 = readers(output_schema(skill.response_schema))
        for answer in [*messages[skill_id], *messages["error"]]:
            assert published.is_valid(answer) and draft_07.is_valid(answer), (skill_id, answer.get("type"))


def test_without_the_portable_rewrite_draft_07_would_miss_a_constraint(
    monkeypatch: pytest.MonkeyPatch, instances: dict[str, list[tuple[str, Any]]]
) -> None:
    """The CAD/USD rule of a search answer is ``dependentSchemas``, which draft-07 does not know."""
    broken = next(i for label, i in instances["inventory.search"] if "USD vehicle in a CAD answer" in label)
    assert validate(broken, "inventory-search-response") != []
    monkeypatch.setattr(schemas, "portable", lambda schema: schema)
    raw = schemas.bundle_any_of(("inventory-search-response", "error"))
    assert Draft7Validator(without_dialect(raw), registry=Registry()).is_valid(broken)  # silently lost
    _, _, draft_07 = readers(output_schema("inventory-search-response"))
    assert not draft_07.is_valid(broken)


CASES = [
    (
        {"type": "object", "dependentSchemas": {"a": {"required": ["b"]}}},
        [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 2}, []],
    ),
    (
        {"type": "object", "dependentRequired": {"a": ["b", "c"]}},
        [{}, {"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}],
    ),
    (
        {
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/n", "maximum": 3}},
            "$defs": {"n": {"type": "integer"}},
        },
        [{"x": 2}, {"x": 5}, {"x": "2"}, {}],
    ),
]


@pytest.mark.parametrize(("schema", "cases"), CASES)
def test_portable_keeps_the_2020_meaning_and_gives_it_to_draft_07(schema: dict[str, Any], cases: list[Any]) -> None:
    original = Draft202012Validator(schema, registry=Registry())
    rewritten = portable(dict(schema))
    for case in cases:
        expected = original.is_valid(case)
        assert Draft202012Validator(rewritten, registry=Registry()).is_valid(case) == expected, case
        assert Draft7Validator(rewritten, registry=Registry()).is_valid(case) == expected, case


@pytest.mark.parametrize("keyword", ["unevaluatedProperties", "prefixItems", "minContains", "$dynamicRef"])
def test_portable_refuses_what_draft_07_cannot_read(keyword: str) -> None:
    with pytest.raises(ValueError, match="draft-07"):
        portable({"type": "object", "properties": {"a": {keyword: False}}})


@pytest.mark.parametrize("name", sorted({s.request_schema for s in SKILLS.values()}))
def test_input_schemas_are_portable_too(name: str) -> None:
    schema = bundled(name)
    Draft7Validator.check_schema(without_dialect(schema))
