"""Tokens a model reads from the MCP tool surface: tools/list, per tool and per framework, and a
default search answer, for the default surface and for ``[mcp] tool_schemas/search_listings = "full"``.

The demo dealer group (generated inventory) is served in process (Starlette's test client: no
socket at all); counts are cl100k tokens (``bench/tokens.py``). Framework views:

- ``anthropic``: ``{name, description, input_schema}`` per tool, what the Messages API receives;
- ``openai-strict``: ``{type: function, function: {name, description, parameters, strict}}`` with
  the parameters made strict by openai-agents' own converter (when ``openai-agents`` is installed);
- ``adk``: ``{name, description, parameters_json_schema, response_json_schema}``, what Google
  ADK's MCP tool hands to google-genai (ADK also passes ``outputSchema``);
- a search answer "as ADK passes it": the text block and ``structuredContent`` together.

    python bench/bench_llm.py [--listings 1500]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokens import count  # noqa: E402

HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def serve(directory: Path, listings: int, full: bool) -> Any:
    from starlette.testclient import TestClient

    from aap.config.loader import load_settings
    from aap.config.mcp import McpSettings
    from aap.inventory.demo import generate_listings
    from aap.server.app import create_app
    from aap.store import open_stores

    database = f"sqlite:///{directory / ('full.db' if full else 'llm.db')}"
    settings = load_settings(None, overrides={"public_url": "http://127.0.0.1:8000", "database": database}, environ={})
    if full:
        settings = dataclasses.replace(settings, mcp=McpSettings(tool_schemas="full", search_listings="full"))
    stores = open_stores(settings.database_url)
    stores.inventory.import_listings(list(generate_listings(listings, seed=7, settings=settings)), replace=True)
    return TestClient(create_app(settings, stores), base_url="http://127.0.0.1:8000")


def rpc(client: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        body["params"] = params
    result: dict[str, Any] = client.post("/mcp", json=body, headers=HEADERS).json()["result"]
    return result


def openai_strict(tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    try:
        from agents.strict_schema import ensure_strict_json_schema
    except ImportError:
        return None
    out = []
    for tool in tools:
        try:
            parameters = ensure_strict_json_schema(dict(tool["inputSchema"]))
        except Exception:  # noqa: BLE001 - the converter refuses: openai-agents then sends it non-strict
            parameters = tool["inputSchema"]
        function = {"name": tool["name"], "description": tool["description"], "parameters": parameters, "strict": True}
        out.append({"type": "function", "function": function})
    return out


def measure(client: Any, label: str) -> None:
    with client:
        listed = rpc(client, "tools/list")
        tools = listed["tools"]
        print(f"\n{label}: tools/list {count(listed):,} tokens ({len(str(listed)):,} characters)")
        print(f"  {'tool':<24} {'input':>7} {'output':>7} {'descr.':>7} {'_meta':>7}")
        for tool in tools:
            print(
                f"  {tool['name']:<24} {count(tool['inputSchema']):>7,} {count(tool.get('outputSchema', {})):>7,} "
                f"{count(tool['description']):>7,} {count(tool.get('_meta', {})):>7,}"
            )
        inputs = sum(count(t["inputSchema"]) for t in tools)
        print(f"  input schemas together: {inputs:,}")
        anthropic = [
            {"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]} for t in tools
        ]
        adk = [
            {
                "name": t["name"],
                "description": t["description"],
                "parameters_json_schema": t["inputSchema"],
                "response_json_schema": t.get("outputSchema"),
            }
            for t in tools
        ]
        print(f"  framework views: anthropic {count(anthropic):,}, adk {count(adk):,}", end="")
        strict = openai_strict(tools)
        print(f", openai-strict {count(strict):,}" if strict is not None else ", openai-strict n/a")
        answer = rpc(client, "tools/call", {"name": "aap_inventory_search", "arguments": {}})
        text = answer["content"][0]["text"]
        structured = answer["structuredContent"]
        adk_view = {"content": answer["content"], "structuredContent": structured, "isError": answer["isError"]}
        vehicles = len(structured["data"]["vehicles"])
        print(
            f"  default search ({vehicles} listings): text {count(text):,}, structuredContent {count(structured):,}, "
            f"as ADK passes both {count(adk_view):,}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listings", type=int, default=1500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for full in (False, True):
            label = '[mcp] tool_schemas = search_listings = "full"' if full else "default surface"
            measure(serve(Path(tmp), args.listings, full), label)


if __name__ == "__main__":
    main()
