"""JSON Pointer (RFC 6901): how every problem list, bound and schema ref names a place.

``details.errors[].field`` locations, configuration problems, the MCP schema bundler and the
client's ``$ref`` reader all read and write pointers; one escaping rule (``~`` as ``~0``, then
``/`` as ``~1``; read back in the other order, RFC 6901 §4) lives here.
"""

from __future__ import annotations

from collections.abc import Iterable


def escape(token: object) -> str:
    """One reference token: ``a/b~c`` → ``a~1b~0c`` (RFC 6901 §3)."""
    return str(token).replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """A reference token read back: ``~1`` then ``~0`` (RFC 6901 §4)."""
    return token.replace("~1", "/").replace("~0", "~") if "~" in token else token


def is_index(token: str) -> bool:
    """Whether ``token`` names an array element: ``0`` or ASCII digits without a leading zero
    (RFC 6901 §4). ``str.isdigit`` is not the test: it holds for ``"²"``, which ``int`` refuses."""
    return token == "0" or (token[:1] in "123456789" and token != "" and token.isascii() and token.isdigit())


def build(tokens: Iterable[object]) -> str:
    """The pointer of a path of keys and indexes: ``("filters", "make", 0)`` → ``/filters/make/0``;
    the empty path is ``""``, the whole document."""
    return "".join("/" + escape(token) for token in tokens)


def tokens(pointer: str) -> list[str]:
    """The unescaped reference tokens of ``pointer``: ``/a~1b/0`` → ``["a/b", "0"]``.

    ``""`` (the whole document) has none. A pointer must start with ``/`` (RFC 6901 §3).
    """
    if not pointer:
        return []
    if not pointer.startswith("/"):
        raise ValueError("a JSON pointer starts with '/'")
    return [unescape(token) for token in pointer[1:].split("/")]
