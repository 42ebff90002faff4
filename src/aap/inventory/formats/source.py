"""Files as they come: archives, encodings and delimiters, sniffed (or given).

A feed arrives as bytes: perhaps gzip- or zip-compressed (one feed inside),
in UTF-8 (with or without a byte-order mark), UTF-16 with a byte-order mark,
or Windows-1252 (what spreadsheets on Windows write), with commas,
semicolons, tabs or pipes between cells. :func:`open_text` undoes all of it
and says what it found, so the import summary can tell the operator.
"""

from __future__ import annotations

import gzip
import io
import zipfile
import zlib
from dataclasses import dataclass

DELIMITERS = (",", ";", "\t", "|")
MAX_EXPANDED_BYTES = 2 << 30  # a compressed feed larger than 2 GiB expanded is refused


class SourceError(ValueError):
    """The bytes cannot be turned into feed text (bad archive, undecodable text)."""


@dataclass(frozen=True)
class FeedText:
    """A feed's text and how it was read."""

    text: str
    name: str  # the file name (the archive member's, for an archive)
    encoding: str  # "utf-8", "utf-8-sig", "utf-16", "cp1252", or the one given
    archive: str | None = None  # "gzip" or "zip"


def _gunzip(data: bytes) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as handle:
            out = handle.read(MAX_EXPANDED_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise SourceError(f"is not a readable gzip file ({exc})") from None
    if len(out) > MAX_EXPANDED_BYTES:
        raise SourceError("expands to more than 2 GiB")
    return out


def _unzip(data: bytes) -> tuple[bytes, str]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
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
        member = members[0]
        if member.file_size > MAX_EXPANDED_BYTES:
            raise SourceError("expands to more than 2 GiB")
        return archive.read(member), member.filename
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
        raise SourceError(f"is not a readable zip archive ({exc})") from None


def unpack(data: bytes, name: str) -> tuple[bytes, str, str | None]:
    """``(bytes, name, archive)``: the one feed inside a gzip or zip archive, or ``data`` itself."""
    if data[:2] == b"\x1f\x8b":
        inner = name[:-3] if name.lower().endswith(".gz") else name
        return _gunzip(data), inner, "gzip"
    if data[:4] == b"PK\x03\x04":
        content, member = _unzip(data)
        return content, member, "zip"
    return data, name, None


def decode(data: bytes, encoding: str | None = None) -> tuple[str, str]:
    """``(text, encoding)``: the given encoding, else by byte-order mark, UTF-8, or Windows-1252."""
    if encoding:
        try:
            return data.decode(encoding).removeprefix("\ufeff"), encoding
        except (UnicodeDecodeError, LookupError) as exc:
            raise SourceError(f"cannot be read as {encoding} ({exc})") from None
    if data.startswith(b"\xef\xbb\xbf"):
        try:
            return data[3:].decode("utf-8"), "utf-8-sig"
        except UnicodeDecodeError as exc:
            raise SourceError(f"starts with a UTF-8 byte-order mark but is not UTF-8 ({exc})") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16").removeprefix("\ufeff"), "utf-16"
        except UnicodeDecodeError as exc:
            raise SourceError(f"is not readable UTF-16 ({exc})") from None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252"), "cp1252"
    except UnicodeDecodeError as exc:
        raise SourceError(f"is neither UTF-8 nor Windows-1252 text (byte {exc.start}); give its encoding") from None


def open_text(data: bytes, name: str, *, encoding: str | None = None) -> FeedText:
    """Unpack and decode a feed file's bytes."""
    content, inner, archive = unpack(data, name)
    text, used = decode(content, encoding)
    return FeedText(text, inner, used, archive)


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
