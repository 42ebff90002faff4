"""Feed text to records: named cells with the physical line each record starts on.

Delimited text gives one header and rows of cells (a quoted cell may span
lines; the record is reported at its first line). XML gives, per listing
element (``<item>`` of a Google feed, ``<listing>`` of a Meta catalog), the
text of each leaf element under a JSON-path name: ``mileage.value``,
``image[0].url`` (elements the format numbers), ``address.city`` (an element
named by its ``name`` attribute). A repeated element (``additional_image_link``)
is a repeated column. Documents with a DTD are refused, so no entity is ever
expanded.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from xml.parsers import expat

GOOGLE_NAMESPACE = "http://base.google.com/ns/1.0"
RECORD_ELEMENTS = ("listing", "item", "entry")

csv.field_size_limit(16 * 1024 * 1024)


class RecordError(ValueError):
    """The text is not a readable file of its kind (bad XML, unreadable CSV)."""

    def __init__(self, message: str, line: int = 1) -> None:
        self.line = line
        super().__init__(message)


@dataclass
class Delimited:
    """A delimited file: its header (and the header's line) and an iterator of ``(line, cells)``."""

    header: list[str]
    header_line: int
    rows: Iterator[tuple[int, list[str]]]


def delimited(text: str, delimiter: str) -> Delimited | None:
    """The header and rows of a delimited file; None when it holds no header at all."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header: list[str] | None = None
    try:
        for cells in reader:
            if any(c.strip() for c in cells):
                header = [c.strip() for c in cells]
                break
    except csv.Error as exc:
        raise RecordError(f"unreadable header ({exc})", reader.line_num) from None
    if header is None:
        return None
    header_line = reader.line_num

    def rows() -> Iterator[tuple[int, list[str]]]:
        last = reader.line_num
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise RecordError(f"unreadable row ({exc})", last + 1) from None
            start, last = last + 1, reader.line_num
            if cells and (len(cells) > 1 or cells[0].strip()):
                yield start, cells

    return Delimited(header, header_line, rows())


@dataclass
class XmlRecords:
    """The listings of an XML feed, as ``(line, [(column, value), ...])``."""

    records: list[tuple[int, list[tuple[str, str]]]] = field(default_factory=list)
    root: str = ""
    google: bool = False  # the document uses Google's g: namespace
    element: str | None = None  # the element taken as one listing


class _XmlReader:
    def __init__(self, item: str | None, indexed: frozenset[str]) -> None:
        self.out = XmlRecords(element=item)
        self.indexed = indexed
        self.depth = 0
        self.record_depth: int | None = None
        self.pairs: list[tuple[str, str]] = []
        self.path: list[str] = []
        self.counts: list[dict[str, int]] = []
        self.children: list[bool] = []
        self.text: list[str] = []
        self.line = 0
        self.parser = expat.ParserCreate(namespace_separator=" ")
        self.parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        self.parser.StartDoctypeDeclHandler = self._doctype
        self.parser.StartElementHandler = self._start
        self.parser.EndElementHandler = self._end
        self.parser.CharacterDataHandler = self._chars

    def _doctype(self, *args: object) -> None:
        raise RecordError("has a DOCTYPE declaration; feeds with a DTD are refused", self.parser.CurrentLineNumber)

    def _name(self, raw: str) -> str:
        uri, _, local = raw.rpartition(" ")
        if uri == GOOGLE_NAMESPACE:
            self.out.google = True
        return local

    def _start(self, raw: str, attrs: dict[str, str]) -> None:
        name = self._name(raw)
        self.depth += 1
        if self.depth == 1:
            self.out.root = name
        if self.record_depth is None:
            if self.out.element is None and name in RECORD_ELEMENTS and self.depth > 1:
                self.out.element = name
            if name == self.out.element:
                self.record_depth = self.depth
                self.line = self.parser.CurrentLineNumber
                self.pairs, self.path, self.counts = [], [], [{}]
                self.children, self.text = [False], []
            return
        self.children[-1] = True
        segment = attrs.get("name") or name
        if name in self.indexed:
            index = self.counts[-1].get(name, 0)
            self.counts[-1][name] = index + 1
            segment = f"{name}[{index}]"
        self.path.append(segment)
        self.counts.append({})
        self.children.append(False)
        self.text = []

    def _chars(self, data: str) -> None:
        if self.record_depth is not None:
            self.text.append(data)

    def _end(self, raw: str) -> None:
        if self.record_depth is not None:
            if self.depth == self.record_depth:
                self.out.records.append((self.line, self.pairs))
                self.record_depth = None
            else:
                had_children = self.children.pop()
                self.counts.pop()
                if not had_children:
                    value = "".join(self.text).strip()
                    if value:
                        self.pairs.append((".".join(self.path), value))
                self.path.pop()
                self.text = []
        self.depth -= 1

    def read(self, text: str) -> XmlRecords:
        try:
            self.parser.Parse(text.encode("utf-8"), True)
        except expat.ExpatError as exc:
            raise RecordError(f"is not well-formed XML ({expat.ErrorString(exc.code)})", exc.lineno) from None
        return self.out


def xml_records(text: str, *, item: str | None = None, indexed: frozenset[str] = frozenset()) -> XmlRecords:
    """Every listing element of an XML feed (``item``: its element name, else found)."""
    if text.startswith("<?xml"):
        end = text.find("?>")
        # The text is decoded already: drop the declaration that names the file's encoding.
        text = '<?xml version="1.0" encoding="utf-8"?>' + text[end + 2 :] if end > 0 else text
    return _XmlReader(item, indexed).read(text)
