"""Files as they come: archives, encodings and delimiters, sniffed (or given), read as a stream.

A feed arrives as bytes: perhaps gzip- or zip-compressed (one feed inside, an
archive inside an archive too), in UTF-8 (with or without a byte-order mark),
UTF-16 with a byte-order mark, or Windows-1252 (what spreadsheets on Windows
write), with commas, semicolons, tabs or pipes between cells. :func:`open_text`
undoes all of it and says what it found, so the import summary can tell the
operator.

Nothing here ever holds the inflated file. Every archive layer is read in
chunks through a running count that refuses the file the moment a layer's
output passes :data:`MAX_EXPANDED_BYTES` (a 2 MB "gzip bomb" that would inflate
to gigabytes costs a few kilobytes of memory and is refused at the cap). A
first pass measures the text and decides its encoding; the reader then takes
it line by line (:meth:`FeedText.lines`), each record bounded by
:data:`MAX_ROW_CHARS` (docs/feeds.md, "Limits").
"""

from __future__ import annotations

import codecs
import gzip
import io
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from aap.inventory.formats.records import RecordError

DELIMITERS = (",", ";", "\t", "|")
#: The most one archive layer may inflate to (bytes); the feed text is the innermost layer.
MAX_EXPANDED_BYTES = 1 << 30
#: Archives inside archives (``feed.csv.gz`` inside a zip is two).
MAX_ARCHIVE_LAYERS = 3
#: The most characters one record (a row, with the lines of its quoted cells) may have.
MAX_ROW_CHARS = 1 << 20
#: What the first pass keeps of the text's start: for sniffing the kind and the delimiter.
HEAD_BYTES = 1 << 16
_CHUNK = 1 << 16
_GZIP = b"\x1f\x8b"
_ZIP = b"PK\x03\x04"


class SourceError(ValueError):
    """The bytes cannot be turned into feed text (bad archive, undecodable text, too large)."""


def _size(count: int) -> str:
    if count >= 1 << 30 and count % (1 << 30) == 0:
        return f"{count >> 30} GiB"
    if count >= 1 << 20 and count % (1 << 20) == 0:
        return f"{count >> 20} MiB"
    return f"{count:,} bytes"


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Capped(io.RawIOBase):
    """A layer's output, counted as it is read; refused once it passes ``cap`` bytes."""

    def __init__(self, inner: _Readable, cap: int, what: str) -> None:
        self.inner = inner
        self.cap = cap
        self.what = what
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            chunk = self.inner.read(min(len(buffer), _CHUNK))
        except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as exc:
            raise SourceError(f"is not a readable {self.what} ({exc})") from None
        size = len(chunk)
        self.count += size
        if self.count > self.cap:
            raise SourceError(f"expands to more than {_size(self.cap)} (the {self.what} was refused at that point)")
        buffer[:size] = chunk
        return size


def _peek(stream: IO[bytes], size: int) -> bytes:
    if isinstance(stream, io.BufferedReader):
        return stream.peek(size)[:size]
    position = stream.tell()
    head = stream.read(size)
    stream.seek(position)
    return head


def _spool(stream: IO[bytes], stack: ExitStack, cap: int) -> IO[bytes]:
    """A non-seekable layer copied to a temporary file (a zip archive must be seekable)."""
    spooled = stack.enter_context(tempfile.TemporaryFile())
    while chunk := stream.read(_CHUNK):
        spooled.write(chunk)
        if spooled.tell() > cap:
            raise SourceError(f"expands to more than {_size(cap)}")
    spooled.seek(0)
    return spooled


def _zip_member(data: IO[bytes], stack: ExitStack) -> tuple[_Readable, str]:
    try:
        archive = stack.enter_context(zipfile.ZipFile(data))
        members = [
            m
            for m in archive.infolist()
            if not m.is_dir()
            and not m.filename.startswith("__MACOSX/")
            and not m.filename.rsplit("/", 1)[-1].startswith(".")
        ]
        if len(members) != 1:
            names = ", ".join(m.filename for m in members[:5]) or "none"
            raise SourceError(f"is a zip archive with {len(members)} files ({names}); it must hold exactly one feed")
        return stack.enter_context(archive.open(members[0])), members[0].filename
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError) as exc:
        raise SourceError(f"is not a readable zip archive ({exc})") from None


def _unpacked(data: bytes, name: str, stack: ExitStack, cap: int) -> tuple[IO[bytes], str, list[str]]:
    """The innermost feed of ``data`` as a stream, its name, and the archives around it (outermost first)."""
    stream: IO[bytes] = io.BytesIO(data)
    seekable = True
    archives: list[str] = []
    while True:
        magic = _peek(stream, 4)
        if magic[:2] != _GZIP and magic != _ZIP:
            return stream, name, archives
        if len(archives) == MAX_ARCHIVE_LAYERS:
            raise SourceError(f"is more than {MAX_ARCHIVE_LAYERS} archives deep")
        if magic[:2] == _GZIP:
            name = name[:-3] if name.lower().endswith(".gz") else name
            inner: _Readable = stack.enter_context(gzip.GzipFile(fileobj=stream, mode="rb"))
            archives.append("gzip")
            what = "gzip file"
        else:
            if not seekable:
                stream = _spool(stream, stack, cap)
            inner, name = _zip_member(stream, stack)
            archives.append("zip")
            what = "zip archive"
        stream = io.BufferedReader(_Capped(inner, cap, what), _CHUNK)
        seekable = False


def _decoder(encoding: str) -> codecs.IncrementalDecoder:
    try:
        return codecs.getincrementaldecoder(encoding)()
    except LookupError:
        raise SourceError(f"cannot be read as {encoding} (unknown encoding)") from None


@dataclass
class FeedText:
    """A feed's text, ready to be read line by line, and how it was read."""

    data: bytes
    name: str  # the file name (the innermost archive member's, for an archive)
    encoding: str  # "utf-8", "utf-8-sig", "utf-16", "cp1252", or the one given
    archive: str | None = None  # "gzip", "zip", or nested: "gzip in zip"
    size: int = 0  # bytes of the feed text (inflated)
    head: str = ""  # the text's first characters (about 64 KiB), for sniffing
    cap: int = MAX_EXPANDED_BYTES
    layers: list[str] = field(default_factory=list)

    @contextmanager
    def lines(self, max_row_chars: int = MAX_ROW_CHARS) -> Iterator[Lines]:
        """The text's physical lines (endings kept), each record at most ``max_row_chars``."""
        with ExitStack() as stack:
            stream, _name, _archives = _unpacked(self.data, self.name, stack, self.cap)
            text = io.TextIOWrapper(stream, encoding=self.encoding, newline="")
            yield Lines(text, max_row_chars)

    @contextmanager
    def chunks(self, size: int = _CHUNK) -> Iterator[Iterator[str]]:
        """The text in pieces of at most ``size`` characters (for XML, whose records are not lines)."""
        with ExitStack() as stack:
            stream, _name, _archives = _unpacked(self.data, self.name, stack, self.cap)
            text = io.TextIOWrapper(stream, encoding=self.encoding)
            yield iter(lambda: text.read(size), "")

    def read(self) -> str:
        """The whole text (small feeds and tests only: a feed is read by :meth:`lines`)."""
        with self.lines() as lines:
            return "".join(lines)


class Lines:
    """Lines of a feed's text for a record reader, counting the characters of the current record.

    The csv module joins lines into a record as quotes require; the reader calls
    :meth:`record_done` after each record, and a record that grows past the limit
    (one huge line, or a quoted cell that never closes) is refused at that point.
    """

    def __init__(self, text: IO[str], limit: int) -> None:
        self.text = text
        self.limit = limit
        self.number = 0  # physical lines read so far
        self.offset = 0  # characters read so far
        self.chars = 0  # characters of the current record
        self.start = 1  # the current record's first line

    def __iter__(self) -> Lines:
        return self

    def __next__(self) -> str:
        line = self.text.readline(self.limit + 1)
        if not line:
            raise StopIteration
        self.number += 1
        self.offset += len(line)
        self.chars += len(line)
        if self.chars > self.limit:
            raise RecordError(f"has a row longer than {self.limit:,} characters", self.start)
        return line

    def record_done(self) -> None:
        self.chars = 0
        self.start = self.number + 1


def open_text(
    data: bytes, name: str, *, encoding: str | None = None, max_expanded_bytes: int = MAX_EXPANDED_BYTES
) -> FeedText:
    """Unpack (with the running cap) and decide the encoding in one streaming pass over the feed.

    The encoding: the given one, else by byte-order mark, else UTF-8 when every
    byte is UTF-8, else Windows-1252.
    """
    with ExitStack() as stack:
        stream, inner, archives = _unpacked(data, name, stack, max_expanded_bytes)
        first = stream.read(HEAD_BYTES)
    if encoding:
        candidates = [encoding]
    elif first.startswith(b"\xef\xbb\xbf"):
        candidates = ["utf-8-sig"]
    elif first.startswith((b"\xff\xfe", b"\xfe\xff")):
        candidates = ["utf-16"]
    else:
        candidates = ["utf-8", "cp1252"]
    failed: dict[str, str] = {}
    chosen: str | None = None
    size = 0
    for candidate in candidates:  # a pass each; a Windows-1252 file fails UTF-8 at its first accent
        decoder = _decoder(candidate)
        size = 0
        try:
            with ExitStack() as stack:
                stream, _inner, _archives = _unpacked(data, name, stack, max_expanded_bytes)
                while chunk := stream.read(_CHUNK):
                    size += len(chunk)
                    decoder.decode(chunk)
            decoder.decode(b"", True)
        except UnicodeDecodeError as exc:
            failed[candidate] = f"byte {size - len(chunk) + exc.start}" if size else "the last bytes"
            continue
        chosen = candidate
        break
    if chosen is None:
        if encoding:
            raise SourceError(f"cannot be read as {encoding} ({failed[encoding]} is not valid)")
        if candidates == ["utf-8-sig"]:
            raise SourceError(f"starts with a UTF-8 byte-order mark but is not UTF-8 ({failed['utf-8-sig']})")
        if candidates == ["utf-16"]:
            raise SourceError(f"is not readable UTF-16 ({failed['utf-16']})")
        raise SourceError(f"is neither UTF-8 nor Windows-1252 text ({failed['cp1252']}); give its encoding")
    head = _decoder(chosen).decode(first, False).removeprefix("\ufeff")
    return FeedText(
        data,
        inner,
        chosen,
        " in ".join(reversed(archives)) or None,
        size,
        head,
        max_expanded_bytes,
        archives,
    )


def decode(data: bytes, encoding: str | None = None) -> tuple[str, str]:
    """``(text, encoding)`` of small uncompressed bytes, by the rules of :func:`open_text`."""
    text = open_text(data, "", encoding=encoding)
    return text.read().removeprefix("\ufeff"), text.encoding


def _unquoted(line: str) -> str:
    """``line`` without its double-quoted parts (delimiters inside quotes do not count)."""
    out = []
    quoted = False
    for ch in line:
        if ch == '"':
            quoted = not quoted
        elif not quoted:
            out.append(ch)
    return "".join(out)


def sniff_delimiter(text: str) -> str:
    """The delimiter of a delimited file: the candidate the header line uses most (``,`` on a tie)."""
    header = _unquoted(text[: text.find("\n") if "\n" in text else len(text)])
    counts = {d: header.count(d) for d in DELIMITERS}
    best = max(DELIMITERS, key=lambda d: counts[d])
    return best if counts[best] else ","


def kind_of(text: str, name: str) -> str:
    """``"xml"``, ``"jsonl"`` or ``"delimited"`` from the content (and, failing that, the name)."""
    head = text.lstrip()[:1]
    if head == "<":
        return "xml"
    if head == "{":
        return "jsonl"
    lowered = name.lower()
    if lowered.endswith(".xml"):
        return "xml"
    if lowered.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    return "delimited"
