"""ECMA-262 ``pattern`` semantics for Python's ``re``, so both validators agree.

JSON Schema patterns are ECMA-262 regular expressions, and that is what the Rust
validator (jsonschema-rs) implements; Python's ``re`` differs in ways that matter
for AAP's patterns: ``$`` also matches before a final newline (``"VIN\\n"`` would
pass ``^...$``), ``\\d``/``\\w`` match any Unicode digit/letter, and ``\\s`` is
Python's whitespace set rather than ECMA's.  :func:`translate` rewrites those
tokens so ``re.search`` answers as jsonschema-rs does; everything else is left as
is (``.`` included: jsonschema-rs, like ``re``, lets it match anything but ``\n``).
The tests compare the two engines character by character.
"""

from __future__ import annotations

import functools
import re

# ECMA-262 WhiteSpace and LineTerminator: TAB VT FF SP NBSP ZWNBSP, Unicode Zs, LF CR LS PS
_SPACE = "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_DIGIT = "0-9"
_WORD = "A-Za-z0-9_"
_CLASS_BODY = {"d": _DIGIT, "s": _SPACE, "w": _WORD}


class Untranslatable(ValueError):
    """A construct whose ECMA meaning this translation does not cover (e.g. ``[\\S]``)."""


def translate(pattern: str) -> str:
    """The ``re`` pattern that matches exactly what ECMA-262 ``pattern`` matches."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            n = pattern[i + 1]
            i += 2
            if n in _CLASS_BODY:
                out.append(_CLASS_BODY[n] if in_class else f"[{_CLASS_BODY[n]}]")
            elif n in "DSW":
                if in_class:
                    raise Untranslatable(f"\\{n} inside a character class")
                out.append(f"[^{_CLASS_BODY[n.lower()]}]")
            elif n in "bB" and not in_class:
                # Unicode word boundaries in jsonschema-rs; not worth imitating unused
                raise Untranslatable(f"\\{n}")
            else:
                out.append("\\" + n)
            continue
        i += 1
        if in_class:
            if c == "]":
                in_class = False
            out.append(c)
        elif c == "[":
            in_class = True
            out.append(c)
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            if pattern.startswith("]", i):  # ECMA: `[]` is the empty class
                raise Untranslatable("empty character class")
        elif c == "$":
            out.append("\\Z")
        else:
            out.append(c)
    return "".join(out)


@functools.lru_cache(maxsize=512)
def compile(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled with ECMA-262 meaning (falls back to ``re``'s own if untranslatable)."""
    try:
        return re.compile(translate(pattern))
    except (Untranslatable, re.error):
        return re.compile(pattern)
