#!/usr/bin/env python3
"""Split the rebuilt OpenAPI document into one JSON Schema 2020-12 file per component.

Input: ``src/aap/spec/schemas/openapi-jsonrpc.json`` (written by ``seed_rebuild.py``).
Output, next to it:

- ``<kebab-case component name>.schema.json`` for every ``components/schemas`` entry,
  with ``$schema`` and ``$id`` = ``https://autoagentprotocol.org/v3.1/schemas/<file>``.
  ``#/components/schemas/X/...`` refs become relative refs between the files
  (``vehicle.schema.json#/properties/vin``), or local ``#/...`` refs within one file.
- the standalone seeds, verbatim: ``001`` as ``agent-card.schema.json`` (the
  ``AgentCard`` component, which differs from it, ships as
  ``agent-card-component.schema.json``), and ``000`` / ``003`` under stems derived
  from their own ``$id`` plus their AAP version (they are not 3.1 documents).

Run ``python tools/schema_split.py`` to regenerate, ``--check`` to verify.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "src" / "aap" / "spec" / "schemas"
OPENAPI = SCHEMAS / "openapi-jsonrpc.json"
SEEDS = ROOT / "tools" / "seeds"  # copies of the spec seeds, as received
BASE = "https://autoagentprotocol.org/v3.1/schemas/"
DIALECT = "https://json-schema.org/draft/2020-12/schema"

# The standalone seed schemas, shipped byte for byte.
STANDALONE = {
    "001_3b6c1b248c9a63be.txt": "agent-card",  # its $id names agent-card.schema.json
    "000_e377c48ef45a2838.txt": None,  # stem from $id (+ version, see below)
    "003_6f7ce1aa19fe78ba.txt": None,
}
# Components whose standalone seed wins the plain stem.
COMPONENT_STEM_OVERRIDES = {"AgentCard": "agent-card-component"}


def kebab(name: str) -> str:
    """InventorySearchRequest -> inventory-search-request, A2aMessage -> a2a-message."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).lower()


def component_stem(name: str) -> str:
    return COMPONENT_STEM_OVERRIDES.get(name, kebab(name))


def seed_stem(schema: dict) -> str:
    """Stem for a standalone seed from its $id; other AAP versions get a suffix."""
    m = re.match(r"^https://autoagentprotocol\.org/(v[\d.]+)/schemas/(.+)\.schema\.json$", schema["$id"])
    if not m:
        raise ValueError(f"unexpected $id {schema['$id']}")
    version, stem = m.groups()
    return stem if version == "v3.1" else f"{stem}-{version}"


def _rewrite_refs(node: Any, own: str, stems: dict[str, str]) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#/components/schemas/"):
                rest = v[len("#/components/schemas/") :]
                name, _, tail = rest.partition("/")
                fragment = "#/" + tail if tail else ""
                if name == own:
                    out[k] = fragment or "#"
                else:
                    out[k] = f"{stems[name]}.schema.json{fragment}"
            else:
                out[k] = _rewrite_refs(v, own, stems)
        return out
    if isinstance(node, list):
        return [_rewrite_refs(v, own, stems) for v in node]
    return node


def component_files(openapi: dict) -> dict[str, dict]:
    """file name -> schema, for every component of the OpenAPI document."""
    components = openapi["components"]["schemas"]
    stems = {name: component_stem(name) for name in components}
    if len(set(stems.values())) != len(stems):
        raise ValueError("two components map to the same file stem")
    files = {}
    for name, body in components.items():
        fname = f"{stems[name]}.schema.json"
        schema = {"$schema": DIALECT, "$id": BASE + fname}
        schema.update(_rewrite_refs(body, name, stems))
        files[fname] = schema
    return files


def seed_files() -> dict[str, str]:
    """file name -> verbatim text of the standalone seed schemas."""
    base = SEEDS
    out = {}
    for seed, stem in STANDALONE.items():
        text = (base / seed).read_text(encoding="utf-8")
        schema = json.loads(text)
        stem = stem or seed_stem(schema)
        if stem == "agent-card" and schema["$id"] != BASE + "agent-card.schema.json":
            raise ValueError("seed 001 is not the agent card schema")
        out[f"{stem}.schema.json"] = text
    return out


def render(schema: dict) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def expected_files() -> dict[str, str]:
    openapi = json.loads(OPENAPI.read_text(encoding="utf-8"))
    files = {name: render(s) for name, s in component_files(openapi).items()}
    for name, text in seed_files().items():
        if name in files:
            raise ValueError(f"{name} would be written twice")
        files[name] = text
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare, do not write")
    args = ap.parse_args(argv)
    files = expected_files()
    present = {p.name for p in SCHEMAS.glob("*.schema.json")}
    stale = sorted(present - set(files))
    if args.check:
        wrong = [
            n for n, t in files.items() if not (SCHEMAS / n).exists() or (SCHEMAS / n).read_text(encoding="utf-8") != t
        ]
        for n in wrong + stale:
            print(f"out of date: {n}")
        return 1 if wrong or stale else 0
    for name, text in files.items():
        (SCHEMAS / name).write_text(text, encoding="utf-8")
    for name in stale:
        (SCHEMAS / name).unlink()
    print(f"wrote {len(files)} schema files to {SCHEMAS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
