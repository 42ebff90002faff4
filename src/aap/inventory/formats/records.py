"""Feed text to records: named cells with the physical line each record starts on.

Delimited text gives one header and rows of cells (a quoted cell may span
lines; the record is reported at its first line). XML gives, per listing
element (``<item>`` of a Google feed, ``<listing>`` of a Meta catalog), the
text of each leaf element under a JSON-path name: ``mileage.value``,
``image[0].url`` (elements the format numbers), ``address.city`` (an element
named by its ``name`` attribute). A repeated element (``additional_image_link``)
is a repeated column. Documents with a DTD are refused, so no entity is ever
expanded.

Both are read as a stream, one record at a time, within the limits of
docs/feeds.md ("Limits"): :data:`MAX_COLUMNS` columns, :data:`MAX_CELL_CHARS`
characters a cell, :data:`MAX_XML_DEPTH` nested elements, and (for XML, whose
records are not lines) :data:`MAX_RECORD_BYTES` a record.
"""

from __future__ import annotations

import csv
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol
from xml.parsers import expat

GOOGLE_NAMESPACE = "http://base.google.com/ns/1.0"
RECORD_ELEMENTS = ("listing", "item", "entry")
#: The most columns a header (or elements a record) may have.
MAX_COLUMNS = 1000
#: The most characters one cell may have: the csv module's own limit, which this module never raises
#: (``csv.field_size_limit`` is process-wide); an XML element's text has the same bound.
MAX_CELL_CHARS = 131_072
#: The most nested elements an XML document may have.
MAX_XML_DEPTH = 32
#: The most bytes (as UTF-8) one XML record may span.
MAX_RECORD_BYTES = 1 << 20


class RecordError(ValueError):
    """The text is not a readable file of its kind (bad XML, unreadable CSV)."""

    def __init__(self, message: str, line: int = 1) -> None:
        self.line = line
        super().__init__(message)


class LineSource(Protocol):
    """Lines for a record reader that bounds each record (:class:`aap.inventory.formats.source.Lines`)."""

    def __iter__(self) -> Iterator[str]: ...
    def __next__(self) -> str: ...
    def record_done(self) -> None: ...


@dataclass
class Delimited:
    """A delimited file: its header (and the header's line) and an iterator of ``(line, cells)``."""

    header: list[str]
    header_line: int
    rows: Iterator[tuple[int, list[str]]]


def _csv_problem(exc: csv.Error, what: str) -> str:
    if "field limit" in str(exc):
        return f"has a {what} with a cell longer than {MAX_CELL_CHARS:,} characters"
    return f"has an unreadable {what} ({exc})"


def _check_cells(cells: list[str], line: int, what: str) -> None:
    if len(cells) > MAX_COLUMNS:
        raise RecordError(f"has a {what} of {len(cells):,} cells; at most {MAX_COLUMNS:,} are read", line)
    if cells and max(map(len, cells)) > MAX_CELL_CHARS:
        raise RecordError(f"has a {what} with a cell longer than {MAX_CELL_CHARS:,} characters", line)


def delimited(lines: LineSource, delimiter: str) -> Delimited | None:
    """The header and rows of a delimited file; None when it holds no header at all."""
    reader = csv.reader(lines, delimiter=delimiter)
    header: list[str] | None = None
    try:
        for cells in reader:
            lines.record_done()
            if any(c.strip() for c in cells):
                header = [c.strip() for c in cells]
                break
    except csv.Error as exc:
        raise RecordError(_csv_problem(exc, "header"), reader.line_num) from None
    if header is None:
        return None
    header_line = reader.line_num
    _check_cells(header, header_line, "header")

    def rows() -> Iterator[tuple[int, list[str]]]:
        last = reader.line_num
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise RecordError(_csv_problem(exc, "row"), last + 1) from None
            lines.record_done()
            start, last = last + 1, reader.line_num
            if cells and (len(cells) > 1 or cells[0].strip()):
                _check_cells(cells, start, "row")
                yield start, cells

    return Delimited(header, header_line, rows())


class XmlRecords:
    """The listings of an XML feed, as ``(line, [(column, value), ...])``, read as they are iterated.

    :meth:`prime` parses up to the first listing, so the document's root, its
    namespace and the listing element are known (format detection) before the
    rest is read.
    """

    def __init__(self, chunks: Iterable[str], item: str | None, indexed: frozenset[str]) -> None:
        self._reader = _XmlReader(self, item, indexed)
        self._chunks = iter(chunks)
        self._done = False
        self.pending: deque[tuple[int, list[tuple[str, str]]]] = deque()
        self.root = ""
        self.google = False  # the document uses Google's g: namespace
        self.element: str | None = item  # the element taken as one listing

    def _more(self) -> None:
        chunk = next(self._chunks, None)
        self._reader.feed(chunk or "", final=chunk is None)
        self._done = chunk is None

    def prime(self) -> XmlRecords:
        while not self.pending and not self._done:
            self._more()
        return self

    def __iter__(self) -> Iterator[tuple[int, list[tuple[str, str]]]]:
        while True:
            while self.pending:
                yield self.pending.popleft()
            if self._done:
                return
            self._more()


class _XmlReader:
    def __init__(self, out: XmlRecords, item: str | None, indexed: frozenset[str]) -> None:
        self.out = out
        self.indexed = indexed
        self.depth = 0
        self.record_depth: int | None = None
        self.record_start = 0
        self.pairs: list[tuple[str, str]] = []
        self.path: list[str] = []
        self.counts: list[dict[str, int]] = []
        self.children: list[bool] = []
        self.text: list[str] = []
        self.text_chars = 0
        self.line = 0
        # The text is decoded already and fed as UTF-8, whatever the declaration says.
        self.parser = expat.ParserCreate(encoding="utf-8", namespace_separator=" ")
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

    def _too_large(self) -> None:
        if self.parser.CurrentByteIndex - self.record_start > MAX_RECORD_BYTES:
            raise RecordError(f"has a listing longer than {MAX_RECORD_BYTES:,} bytes", self.line)

    def _start(self, raw: str, attrs: dict[str, str]) -> None:
        name = self._name(raw)
        self.depth += 1
        if self.depth > MAX_XML_DEPTH:
            raise RecordError(f"nests elements more than {MAX_XML_DEPTH} deep", self.parser.CurrentLineNumber)
        if self.depth == 1:
            self.out.root = name
        if self.record_depth is None:
            if self.out.element is None and name in RECORD_ELEMENTS and self.depth > 1:
                self.out.element = name
            if name == self.out.element:
                self.record_depth = self.depth
                self.line = self.parser.CurrentLineNumber
                self.record_start = self.parser.CurrentByteIndex
                self.pairs, self.path, self.counts = [], [], [{}]
                self.children, self.text, self.text_chars = [False], [], 0
            return
        self._too_large()
        self.children[-1] = True
        segment = attrs.get("name") or name
        if name in self.indexed:
            index = self.counts[-1].get(name, 0)
            self.counts[-1][name] = index + 1
            segment = f"{name}[{index}]"
        self.path.append(segment)
        self.counts.append({})
        self.children.append(False)
        self.text, self.text_chars = [], 0

    def _chars(self, data: str) -> None:
        if self.record_depth is not None:
            self.text_chars += len(data)
            if self.text_chars > MAX_CELL_CHARS:
                raise RecordError(f"has an element with more than {MAX_CELL_CHARS:,} characters of text", self.line)
            self.text.append(data)

    def _end(self, raw: str) -> None:
        if self.record_depth is not None:
            if self.depth == self.record_depth:
                self.out.pending.append((self.line, self.pairs))
                self.record_depth = None
            else:
                had_children = self.children.pop()
                self.counts.pop()
                if not had_children:
                    value = "".join(self.text).strip()
                    if value:
                        self.pairs.append((".".join(self.path), value))
                        if len(self.pairs) > MAX_COLUMNS:
                            raise RecordError(f"has a listing of more than {MAX_COLUMNS:,} elements", self.line)
                self.path.pop()
                self.text, self.text_chars = [], 0
        self.depth -= 1

    def feed(self, text: str, *, final: bool) -> None:
        try:
            self.parser.Parse(text.encode("utf-8"), final)
        except expat.ExpatError as exc:
            raise RecordError(f"is not well-formed XML ({expat.ErrorString(exc.code)})", exc.lineno) from None


def xml_records(chunks: Iterable[str], *, item: str | None = None, indexed: frozenset[str] = frozenset()) -> XmlRecords:
    """The listing elements of an XML feed's text (``item``: their element name, else found), primed."""
    return XmlRecords(chunks, item, indexed).prime()
