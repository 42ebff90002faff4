"""What agent frameworks make of the live ``tools/list``, checked against each provider's rules.

The converters of LangChain (Anthropic, Google GenAI, OpenAI strict), openai-agents (strict),
pydantic-ai (OpenAI strict, Google), the schema google-genai receives from Google ADK, and the
Vercel AI SDK's Anthropic, Google and OpenAI providers (Node, tests/node/ai_sdk_tools.mjs) run on
the ``tools/list`` of a served dealer and of a platform tenant; no model is called, nothing leaves
loopback. The rules and their sources are the table in docs/mcp.md ("For LLM agents").
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from agents.exceptions import UserError
from agents.strict_schema import ensure_strict_json_schema
from google.genai import types as genai
from langchain_anthropic.chat_models import convert_to_anthropic_tool
from langchain_core.tools import StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_google_genai._function_utils import convert_to_genai_function_declarations
from pydantic_ai.profiles.google import GoogleJsonSchemaTransformer
from pydantic_ai.profiles.openai import OpenAIJsonSchemaTransformer

from factories import live_dealer_fixture
from mcp_helpers import Dealer, legacy_headers, rpc
from node_env import NODE_PROJECT, node_ready
from platform_support import PLATFORM_HOST, PlatformServer, listings, tenant_config

dealer = live_dealer_fixture("mcp-converters")

#: OpenAI structured outputs, strict mode: the keywords it refuses and the formats it reads.
OPENAI_REFUSED = {"allOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependentRequired"}
OPENAI_REFUSED |= {"uniqueItems", "contains", "minLength", "maxLength", "patternProperties", "const", "examples"}
OPENAI_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
OPENAI_MAX_DEPTH = 10
#: Gemini function declarations: what its schema (OpenAPI subset) and JSON-schema mode cannot read.
GEMINI_REFUSED = {"$ref", "$defs", "const", "allOf", "not", "if", "then", "else", "dependentSchemas", "examples"}


def _walk(node: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, dict[str, Any], int]]:
    if not isinstance(node, dict):
        return
    yield path, node, depth
    for name, member in (node.get("properties") or {}).items():
        yield from _walk(member, f"{path}/{name}", depth + 1)
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}/items", depth + 1)
    for index, branch in enumerate(node.get("anyOf") or []):
        yield from _walk(branch, f"{path}/anyOf/{index}", depth)


def anthropic_problems(schema: dict[str, Any]) -> list[str]:
    """Anthropic Messages API: an object root without oneOf/allOf/anyOf at the top level."""
    problems = [] if schema.get("type") == "object" else ["root is not type object"]
    return problems + [f"root {k}" for k in ("oneOf", "allOf", "anyOf") if k in schema]


def openai_strict_problems(schema: dict[str, Any]) -> list[str]:
    """OpenAI strict mode: plain object root, every object closed and fully required, the subset."""
    problems = anthropic_problems(schema)
    for path, node, depth in _walk(schema):
        problems += [f"{path or '/'}: {k}" for k in OPENAI_REFUSED & set(node)]
        if "format" in node and node["format"] not in OPENAI_FORMATS:
            problems.append(f"{path}: format {node['format']}")
        if depth > OPENAI_MAX_DEPTH:
            problems.append(f"{path}: nested deeper than {OPENAI_MAX_DEPTH}")
        if node.get("type") == "object" or "properties" in node:
            if node.get("additionalProperties") is not False:
                problems.append(f"{path or '/'}: additionalProperties is not false")
            if sorted(node.get("required", [])) != sorted(node.get("properties", {})):
                problems.append(f"{path or '/'}: not every property is required")
        if "$ref" in node and not str(node["$ref"]).startswith("#/$defs/"):
            problems.append(f"{path}: $ref {node['$ref']}")
        for index, branch in enumerate(node.get("anyOf") or []):
            if "type" not in branch and "$ref" not in branch:
                problems.append(f"{path}/anyOf/{index}: untyped")
    return problems


def gemini_json_problems(schema: dict[str, Any]) -> list[str]:
    """Gemini (JSON-schema declarations, as ADK sends them): typed variants, no nested refs or const."""
    problems = []
    for path, node, _ in _walk(schema):
        problems += [f"{path or '/'}: {k}" for k in GEMINI_REFUSED & set(node)]
        for index, branch in enumerate(node.get("anyOf") or []):
            if "type" not in branch:
                problems.append(f"{path}/anyOf/{index}: untyped")
        if "enum" in node and node.get("type") not in ("string", "integer", "number"):
            problems.append(f"{path}: enum without a string or number type")
    return problems


def gemini_declaration_problems(schema: genai.Schema | None, expected: dict[str, Any], path: str = "") -> list[str]:
    """A converted Gemini ``Schema`` keeps every parameter, each with a real type, and makes no
    optional member required (Gemini needs no ``null``: a member it may leave out is optional)."""
    if schema is None:
        return [f"{path or '/'}: no schema (parameters lost)"]
    problems = []
    if schema.type is None or schema.type == genai.Type.TYPE_UNSPECIFIED:
        problems.append(f"{path or '/'}: no type")
    branch = expected
    if "anyOf" in expected:  # nullable: the converter keeps the non-null branch
        branch = next(b for b in expected["anyOf"] if b.get("type") != "null")
    if not set(schema.required or ()) <= set(branch.get("required", ())):
        problems.append(f"{path or '/'}: optional members made required")
    wanted = branch.get("type")
    if wanted and schema.type is not None and schema.type.value.lower() != wanted:
        problems.append(f"{path}: {schema.type.value} instead of {wanted}")
    members = branch.get("properties") or {}
    got = schema.properties or {}
    if set(members) != set(got):
        problems.append(f"{path or '/'}: parameters {sorted(set(members) ^ set(got))} differ")
    for name in set(members) & set(got):
        problems += gemini_declaration_problems(got[name], members[name], f"{path}/{name}")
    if "items" in branch:
        problems += gemini_declaration_problems(schema.items, branch["items"], f"{path}/items")
    return problems


def gemini_dict_problems(schema: Any, expected: dict[str, Any], path: str = "") -> list[str]:
    """:func:`gemini_declaration_problems` for a declaration in wire form (the AI SDK's request)."""
    if not isinstance(schema, dict):
        return [f"{path or '/'}: no schema (parameters lost)"]
    problems = [f"{path or '/'}: {k}" for k in GEMINI_REFUSED & set(schema)]
    branch = expected
    if "anyOf" in expected:
        branch = next(b for b in expected["anyOf"] if b.get("type") != "null")
    if schema.get("type") != branch.get("type"):
        problems.append(f"{path or '/'}: type {schema.get('type')} instead of {branch.get('type')}")
    if not set(schema.get("required") or ()) <= set(branch.get("required", ())):
        problems.append(f"{path or '/'}: optional members made required")
    members, got = branch.get("properties") or {}, schema.get("properties") or {}
    if set(members) != set(got):
        problems.append(f"{path or '/'}: parameters {sorted(set(members) ^ set(got))} differ")
    for name in set(members) & set(got):
        problems += gemini_dict_problems(got[name], members[name], f"{path}/{name}")
    if "items" in branch:
        problems += gemini_dict_problems(schema.get("items"), branch["items"], f"{path}/items")
    return problems


def ai_sdk_problems(report: dict[str, Any]) -> dict[str, list[str]]:
    """The Vercel AI SDK's provider requests (tests/node/ai_sdk_tools.mjs) against the rules."""
    tools = {t["name"]: t for t in report["tools"]}
    problems: dict[str, list[str]] = {}
    for provider, outcome in report["providers"].items():
        found = problems.setdefault(f"ai-sdk {provider}", [])
        if "body" not in outcome:
            found.append(f"threw: {outcome.get('error')}")
            continue
        body = outcome["body"]
        if provider == "anthropic":
            sent = {t["name"]: t["input_schema"] for t in body["tools"]}
            found += [f"{n}: {p}" for n, s in sent.items() for p in anthropic_problems(s)]
        elif provider == "openai":
            sent = {t["name"]: t["parameters"] for t in body["tools"]}
            for name, schema in sent.items():
                if next(t.get("strict") for t in body["tools"] if t["name"] == name):
                    found += [f"{name}: {p}" for p in openai_strict_problems(schema)]
                found += [f"{name}: {p}" for p in anthropic_problems(schema)]  # object root either way
        else:
            (group,) = body["tools"]
            sent = {d["name"]: d.get("parameters") for d in group["functionDeclarations"]}
            found += [f"{n}: {p}" for n, s in sent.items() for p in gemini_dict_problems(s, tools[n]["inputSchema"])]
        if set(sent) != set(tools):
            found.append(f"tools sent: {sorted(sent)}")
    return problems


def run_ai_sdk(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [node_ready(), str(NODE_PROJECT / "ai_sdk_tools.mjs"), *args],
        cwd=NODE_PROJECT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = orjson.loads(done.stdout)
    return report


def structured_tool(tool: dict[str, Any]) -> StructuredTool:
    """The LangChain tool langchain-mcp-adapters makes of an MCP tool (``args_schema`` = its
    ``inputSchema``; the adapter itself pins the 1.x MCP SDK, so it is not installed here)."""
    return StructuredTool(
        name=tool["name"], description=tool["description"], args_schema=tool["inputSchema"], func=lambda **_: ""
    )


def convert_everywhere(tools: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Every framework's view of ``tools``, with what breaks each provider's rules."""
    problems: dict[str, list[str]] = {}

    def report(view: str, name: str, found: list[str]) -> None:
        problems.setdefault(view, []).extend(f"{name}: {p}" for p in found)

    for tool in tools:
        name, schema = tool["name"], tool["inputSchema"]
        lc = structured_tool(tool)
        report("langchain-anthropic", name, anthropic_problems(convert_to_anthropic_tool(lc)["input_schema"]))
        openai_tool = convert_to_openai_tool(lc, strict=True)
        report("langchain-openai strict", name, openai_strict_problems(openai_tool["function"]["parameters"]))
        ((declarations,),) = [t.function_declarations or [None] for t in convert_to_genai_function_declarations([lc])]
        report("langchain-google-genai", name, gemini_declaration_problems(declarations.parameters, schema))
        try:
            strict = ensure_strict_json_schema(orjson.loads(orjson.dumps(schema)))
        except UserError as exc:  # openai-agents then sends the tool non-strict
            report("openai-agents strict", name, [f"refused: {exc}"])
        else:
            report("openai-agents strict", name, openai_strict_problems(strict))
        pai_openai = OpenAIJsonSchemaTransformer(orjson.loads(orjson.dumps(schema)), strict=True).walk()
        report("pydantic-ai openai strict", name, openai_strict_problems(pai_openai))
        pai_google = GoogleJsonSchemaTransformer(orjson.loads(orjson.dumps(schema))).walk()
        report("pydantic-ai google", name, gemini_json_problems(pai_google))
        adk = genai.FunctionDeclaration(  # what Google ADK's MCP tool builds (JSON-schema declarations)
            name=name,
            description=tool["description"],
            parameters_json_schema=schema,
            response_json_schema=tool.get("outputSchema"),
        )
        report("google-adk / google-genai", name, gemini_json_problems(adk.parameters_json_schema))
        report("google-adk / google-genai", name, gemini_json_problems(adk.response_json_schema or {}))
    return problems


def assert_every_provider_accepts(tools: list[dict[str, Any]]) -> None:
    problems = convert_everywhere(tools)
    assert len(problems) == 7  # every view was built
    assert {view: found for view, found in problems.items() if found} == {}


def test_every_framework_converts_the_dealer_tools_for_its_provider(dealer: Dealer) -> None:
    listed = httpx.post(dealer.mcp_url, json=rpc("tools/list"), headers=legacy_headers(), timeout=30).json()
    assert_every_provider_accepts(listed["result"]["tools"])


@pytest.mark.slow
def test_the_ai_sdk_providers_send_the_dealer_tools_as_their_apis_accept(dealer: Dealer) -> None:
    problems = ai_sdk_problems(run_ai_sdk(dealer.mcp_url))
    assert set(problems) == {"ai-sdk anthropic", "ai-sdk google", "ai-sdk openai"}
    assert {view: found for view, found in problems.items() if found} == {}


def test_the_checks_catch_the_surface_that_broke_them() -> None:
    """The bundled AAP schemas (``tool_schemas = "full"``) break every provider, as reported."""
    from aap.bindings.mcp.tools import build_tools
    from aap.skills.catalog import SKILLS

    full = build_tools(list(SKILLS.values()), {}, full_schemas=True)
    tools = [spec.tool.model_dump(by_alias=True, exclude_none=True, mode="json") for spec in full.values()]
    problems = convert_everywhere(tools)
    assert any("root allOf" in p for p in problems["langchain-anthropic"])  # Claude: HTTP 400 on every turn
    assert any("parameters" in p for p in problems["langchain-google-genai"])  # Gemini: parameters lost
    assert problems["openai-agents strict"] and problems["google-adk / google-genai"]


@pytest.mark.slow
def test_every_framework_converts_a_platform_tenants_tools(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/platform.db"
    config = tmp_path / "platform.toml"
    config.write_text(f'database = "{url}"\n\n[platform]\nhost = "{PLATFORM_HOST}"\n', encoding="utf-8")
    document = tmp_path / "dealer-a.toml"
    document.write_text(tenant_config("Alpha Motors"), encoding="utf-8")
    feed = tmp_path / "dealer-a.jsonl"
    feed.write_bytes(b"\n".join(orjson.dumps(x) for x in listings("dealer-a", "Honda", 3, "Alpha Motors Main")))
    for args in (
        ["tenants", "--config", str(config), "add", "dealer-a", "--config", str(document), "--domain", "alpha.example"],
        ["import", str(feed), "--tenant", "dealer-a", "--config", str(config), "--replace"],
    ):
        done = subprocess.run([sys.executable, "-m", "aap", *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    server = PlatformServer(tmp_path, url, workers=1)
    try:
        with server.client() as http:
            answer = http.post("https://alpha.example/mcp", json=rpc("tools/list"), headers=legacy_headers())
        assert answer.status_code == 200, answer.text + server.log_tail()
        tools = answer.json()["result"]["tools"]
        assert [t["name"] for t in tools][:1] == ["aap_dealer_information"]
        assert_every_provider_accepts(tools)
        listed = tmp_path / "tools.json"
        listed.write_bytes(orjson.dumps(answer.json()["result"]))
        problems = ai_sdk_problems(run_ai_sdk("--file", str(listed)))
        assert {view: found for view, found in problems.items() if found} == {}
    finally:
        server.stop()
