"""Every pointer into ``docs/`` that a reader may follow leads somewhere.

A citation is ``docs/FILE.md``, ``docs/FILE.md#anchor``, ``docs/FILE.md, "Section"`` (also
``docs/FILE.md "Section"``, ``docs/FILE.md ("Section")``, several names joined by ``and``), or
``docs/FILE.md §N`` (the heading numbered ``N.``), in any text file of the repository that a
reader opens: the sources, the tests, the benchmarks and tools, the README, CONTRIBUTING,
CHANGELOG, ``pyproject.toml`` and the docs themselves, where relative Markdown links
(``[text](search.md#request-bounds)``, ``[text](#rate-limiting)``) count too. The file must exist,
an anchor must be the GitHub slug of one of its headings, and a quoted section name must be
one of its headings (``` `code` ``` marks and a leading ``N.`` aside), or the start of one up to
a word boundary (``"The HTTP path"`` names ``## The HTTP path: `/a2a` next to a bare server``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: Where citations are read: every text file a reader of the repository opens.
SCANNED_TREES = ("src", "tests", "bench", "tools", "docs", ".ci", "deploy")
SCANNED_FILES = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "pyproject.toml", "Dockerfile", "compose.yaml")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".html", ".txt", ".yaml", ".yml", ".cfg", ".service", ".sh", ""}
SKIPPED_PARTS = {"node_modules", "__pycache__", ".venv", "seeds"}


def scanned_files() -> list[Path]:
    out = [ROOT / name for name in SCANNED_FILES if (ROOT / name).is_file()]
    for tree in SCANNED_TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and not SKIPPED_PARTS & set(path.parts):
                if path.suffix == "" and path.parent.name != ".ci":
                    continue
                out.append(path)
    return [p for p in out if p != Path(__file__).resolve()]  # this file's samples lead nowhere on purpose


# -- headings and their GitHub slugs ---------------------------------------------------------

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_NUMBER = re.compile(r"^\d+(?:\.\d+)*\.\s+")


def headings(markdown: str) -> list[str]:
    """The text of every ATX heading, outside fenced code, as GitHub renders it (no markup)."""
    out: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            text = _LINK.sub(r"\1", match.group(2))
            out.append(text.replace("`", "").replace("**", ""))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = "".join(ch for ch in heading.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def slugs(markdown: str) -> set[str]:
    """Every anchor of a page; a repeated heading gets ``-1``, ``-2`` … as on GitHub."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in headings(markdown):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def names_a_section(name: str, markdown: str) -> bool:
    """Whether ``name`` is a heading of the page, or its start up to a word boundary."""
    wanted = name.strip().rstrip(".").replace("`", "").casefold()
    for heading in headings(markdown):
        for text in {heading, _NUMBER.sub("", heading)}:
            text = text.casefold()
            if text == wanted or (text.startswith(wanted) and not text[len(wanted)].isalnum()):
                return True
    return False


def numbered_section(number: str, markdown: str) -> bool:
    return any(h.startswith(f"{number}.") for h in headings(markdown))


@cache
def page(name: str) -> str | None:
    path = DOCS / name
    return path.read_text(encoding="utf-8") if path.is_file() else None


# -- citations ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Citation:
    where: str  # path:line
    page: str  # file name under docs/
    anchor: str | None = None
    sections: tuple[str, ...] = ()
    number: str | None = None

    def problem(self) -> str | None:
        text = page(self.page)
        if text is None:
            return f"{self.where}: docs/{self.page} does not exist"
        if self.anchor is not None and self.anchor not in slugs(text):
            return f"{self.where}: docs/{self.page} has no heading with the anchor #{self.anchor}"
        for name in self.sections:
            if not names_a_section(name, text):
                return f'{self.where}: docs/{self.page} has no section "{name}"'
        if self.number is not None and not numbered_section(self.number, text):
            return f"{self.where}: docs/{self.page} has no section numbered {self.number}"
        return None


_QUOTED = r'"([^"\n]{1,80})"'
_CITE = re.compile(
    r"\bdocs/(?P<page>[A-Za-z0-9_-]+\.md)(?:#(?P<anchor>[A-Za-z0-9_-]+))?"
    r"(?:(?P<sep>,\s*|\s+|\s*\(\s*)(?P<names>" + _QUOTED + r"(?:\s*(?:,|and|or)\s*" + _QUOTED + r")*)"
    r"|,?\s*§\s*(?P<number>\d+))?"
)
_MD_TARGET = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_CONTINUATION = re.compile(r"[ \t]*\n[ \t]*(?:(?:#+|//|\*)[ \t]*)?")


def _flatten(text: str) -> tuple[str, list[int]]:
    """The text with line breaks (and a comment's ``#`` that continues it) as one space, so a
    citation broken over two lines reads as one; and each character's line number."""
    flat: list[str] = []
    lines: list[int] = []
    line, last = 1, 0
    for match in _CONTINUATION.finditer(text):
        chunk = text[last : match.start()]
        flat.append(chunk)
        lines.extend([line] * len(chunk))
        flat.append(" ")
        lines.append(line)
        line += match.group().count("\n")
        last = match.end()
    flat.append(text[last:])
    lines.extend([line] * (len(text) - last))
    return "".join(flat), lines


def citations(path: Path, root: Path = ROOT) -> list[Citation]:
    text = path.read_text(encoding="utf-8", errors="replace")
    flat, lines = _flatten(text)
    rel = path.relative_to(root)
    out: list[Citation] = []
    for match in _CITE.finditer(flat):
        names = tuple(re.findall(_QUOTED, match.group("names") or ""))
        out.append(Citation(f"{rel}:{lines[match.start()]}", match["page"], match["anchor"], names, match["number"]))
    if path.suffix == ".md":
        out.extend(_markdown_links(path, flat, lines, root))
    return out


def _markdown_links(path: Path, flat: str, lines: list[int], root: Path = ROOT) -> list[Citation]:
    """Relative links of a Markdown file that land in docs/ (``docs/…`` ones are read above)."""
    rel = path.relative_to(root)
    out: list[Citation] = []
    for match in _MD_TARGET.finditer(flat):
        target = match["target"]
        if re.match(r"[a-z]+:", target) or target.startswith("docs/"):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path.resolve()
        if resolved.parent != DOCS or resolved.suffix != ".md":
            continue
        out.append(Citation(f"{rel}:{lines[match.start()]}", resolved.name, anchor or None))
    return out


def test_every_doc_citation_resolves() -> None:
    found = [c for path in scanned_files() for c in citations(path)]
    assert len(found) > 200, "the reader found almost no citations: is the pattern still right?"
    problems = sorted({p for c in found if (p := c.problem())})
    assert not problems, "citations that lead nowhere:\n" + "\n".join(problems)


# -- the reader itself -------------------------------------------------------------------------

SAMPLE_PAGE = """# Title

## The HTTP path: `/a2a` next to a bare server

```sh
# not a heading
```

## 8. Delivery: the outbox

### `near` and `distance_mi`

## Memory

## Memory
"""


def test_slugs_follow_github() -> None:
    assert slugs(SAMPLE_PAGE) == {
        "title",
        "the-http-path-a2a-next-to-a-bare-server",
        "8-delivery-the-outbox",
        "near-and-distance_mi",
        "memory",
        "memory-1",
    }


@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("The HTTP path", True),
        ("The HTTP path: `/a2a` next to a bare server", True),
        ("The HTTP pa", False),
        ("Delivery: the outbox", True),
        ("near", True),
        ("not a heading", False),
        ("Resend", False),
    ],
)
def test_section_names(name: str, found: bool) -> None:
    assert names_a_section(name, SAMPLE_PAGE) is found


def test_the_reader_finds_each_form(tmp_path: Path) -> None:
    source = tmp_path / "src" / "x.py"
    source.parent.mkdir()
    source.write_text(
        '"""See docs/search.md, "Request bounds" and "Sort"; docs/leads.md §8;\n'
        'docs/a2a.md#errors and docs/mcp.md ("Tools"), docs/poppy.md "MCP for signed-in\n'
        '# agents" and docs/x.md."""\n'
    )
    assert citations(source, tmp_path) == [
        Citation("src/x.py:1", "search.md", None, ("Request bounds", "Sort")),
        Citation("src/x.py:1", "leads.md", number="8"),
        Citation("src/x.py:2", "a2a.md", "errors"),
        Citation("src/x.py:2", "mcp.md", None, ("Tools",)),
        Citation("src/x.py:2", "poppy.md", None, ("MCP for signed-in agents",)),
        Citation("src/x.py:3", "x.md"),
    ]
    assert [c.problem() for c in citations(source, tmp_path)][-1] == "src/x.py:3: docs/x.md does not exist"


def test_markdown_links_count() -> None:
    text = "[a](search.md#sort) [b](#layers) [c](https://x/y.md) [d](../README.md)"
    found = _markdown_links(DOCS / "architecture.md", *_flatten(text))
    assert [(c.page, c.anchor) for c in found] == [("search.md", "sort"), ("architecture.md", "layers")]


# -- the module tables of package docstrings -------------------------------------------------

_TABLE_ROW = re.compile(r"^``(?P<name>[a-z_][a-z0-9_]*)``\s{2,}", re.MULTILINE)


def test_package_tables_name_modules_that_exist() -> None:
    """A package docstring's table of modules (``name``  what it holds) names modules of that package."""
    missing = []
    for init in sorted((ROOT / "src" / "aap").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        for match in _TABLE_ROW.finditer(doc):
            name = match["name"]
            if not (init.parent / f"{name}.py").is_file() and not (init.parent / name / "__init__.py").is_file():
                missing.append(f"{init.relative_to(ROOT)}: lists ``{name}``, which is not a module of the package")
    assert not missing, "\n".join(missing)


_TRACKER = re.compile(r"\bissues?\s+#?\d+|\bthe issue's\b", re.IGNORECASE)


def test_no_tracker_numbers() -> None:
    """The repository cites the seeds, RFCs and its own docs; never a tracker it does not contain."""
    found = []
    for path in scanned_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if match := _TRACKER.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {match.group()!r}")
    assert not found, "name the feature or the date instead:\n" + "\n".join(found)
