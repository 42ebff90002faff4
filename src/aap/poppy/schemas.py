"""Bundle the packaged AAP JSON Schemas into OpenAPI ``components/schemas``.

Each schema file is a JSON Schema 2020-12 document with an ``$id`` and refs
that are relative to it (``./vehicle.schema.json#/$defs/x``, ``#/$defs/y``).
Inside an OpenAPI document every ref must instead point into
``#/components/schemas/<Name>``; this module copies the documents a set of
schemas needs (transitively) and rewrites their refs, so the OpenAPI document
is self-contained and resolvable offline.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import lru_cache
from typing import Any
from urllib.parse import urldefrag, urljoin

from aap.spec import schema_files

SUFFIX = schema_files.SUFFIX


@lru_cache(maxsize=1)
def _ids() -> dict[str, str]:
    """``$id`` (and the file-name URL next to it) -> schema stem."""
    ids: dict[str, str] = {}
    for stem, document in schema_files.documents().items():
        ids[urldefrag(document["$id"])[0]] = stem
        ids.setdefault(urljoin(document["$id"], stem + SUFFIX), stem)
    return ids


def _camel(stem: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in stem.split("-"))


def bundle(names: dict[str, str]) -> dict[str, Any]:
    """``{schema stem: component name}`` → components (plus every schema they reference)."""
    docs, ids = schema_files.documents(), _ids()
    wanted = dict(names)
    out: dict[str, Any] = {}
    pending = list(wanted)

    def referrer(stem: str, base: str) -> Callable[[str], str]:
        """The ``$ref`` rewriter of schema ``stem`` (whose ``$id`` is ``base``); queues what it meets."""

        def component_ref(ref: str) -> str:
            target, fragment = urldefrag(urljoin(base, ref))
            target_stem = ids.get(target)
            if target_stem is None:
                raise KeyError(f"schema {stem!r} refers to unknown {ref!r}")
            if target_stem not in wanted:
                wanted[target_stem] = _camel(target_stem)
                pending.append(target_stem)
            if fragment and not fragment.startswith("/"):
                raise KeyError(f"schema {stem!r} uses an anchor ref {ref!r}; only JSON pointers are bundled")
            return f"#/components/schemas/{wanted[target_stem]}{fragment}"

        return component_ref

    while pending:
        stem = pending.pop()
        if wanted[stem] in out:
            continue
        if stem not in docs:
            raise KeyError(f"no packaged schema named {stem!r}")
        document = docs[stem]
        out[wanted[stem]] = _rewrite(copy.deepcopy(document), referrer(stem, document["$id"]), top=True)
    return out


def _rewrite(node: Any, component_ref: Any, *, top: bool = False) -> Any:
    if isinstance(node, dict):
        if top:
            node.pop("$id", None)
            node.pop("$schema", None)
        for key, value in list(node.items()):
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                node[key] = component_ref(value)
            elif key not in ("const", "enum", "examples", "default"):
                node[key] = _rewrite(value, component_ref)
        return node
    if isinstance(node, list):
        return [_rewrite(item, component_ref) for item in node]
    return node
