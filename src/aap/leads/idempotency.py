"""Who a submission belongs to, and whether a retry is "the same payload".

Scope (``LeadSubmitRequest.idempotency_key``, seed 004): the selling dealer, the *verified* caller identity the
binding passes in ``CallContext.caller_id`` ("anonymous" for an anonymous A2A
caller), and the client's ``idempotency_key``. The self-declared
``source_agent`` never takes part. The key space is shared by all bindings,
because every binding calls the same skill with the same context.

Sameness (a project decision, docs/leads.md §5): the SHA-256 of the canonical JSON of the whole request
object (the DataPart ``data``) with sorted keys and no insignificant
whitespace; envelope fields such as ``messageId`` never reach the skill, so they
never count. Integral floats were already folded to integers by the service
(``25.0`` from a protobuf client equals ``25``).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

ANONYMOUS = "anonymous"


def canonical_json(payload: Any) -> bytes:
    return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)


def payload_hash(payload: Any) -> str:
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def caller_scope(caller_id: str | None) -> str:
    """The verified identity, or ``anonymous``; a verified id can never collide with it."""
    return ANONYMOUS if caller_id is None else "id:" + caller_id
