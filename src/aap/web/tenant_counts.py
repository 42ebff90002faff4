"""Each platform tenant's requests, counted in records of a table (docs/platform.md, "Operating tenants").

``aap_tenant_requests_total`` and ``aap_tenant_errors_total`` carry a label for every tenant a
worker has served: on a platform of 100,000 tenants, 100,000 label sets in each worker. The
library's labelled counters make an object graph for each label set, which costs about a
kilobyte of every worker's memory and a few microseconds of the first request's time; here a
tenant's counts are one record of a table — its key and a few unsigned 64-bit counts, about a
hundred bytes — found through a dictionary and written in place.

With several workers (a multi-process directory, :mod:`aap.web.metrics`) each table is a file
of that directory which its worker maps into memory, as the library keeps its own counters: a
scrape reaching any worker reads every worker's files, so it sees every count made until then,
nothing lags, and the counts of a worker that ended stay in the totals. A process without that
directory keeps its tables in memory.

A file is a header — the records in use, then the layout (key bytes, counts per record) — and
the records, each a key (its length, then UTF-8) and its counts. A record is written whole
before the header counts it, so a reader sees a record complete or not at all.
"""

from __future__ import annotations

import glob
import mmap
import os
import struct
import threading
import uuid
from collections.abc import Iterator

_HEADER = struct.Struct("<QII")  # records in use, key bytes, counts per record
_COUNT = struct.Struct("<Q")
_FIRST_RECORDS = 256
#: What a table's file name ends with (not ``.db``: the library reads every ``*.db`` file of
#: the directory as its own).
SUFFIX = ".counts"


def _layout(key_bytes: int, width: int) -> tuple[int, int]:
    """Where a record's counts begin and its size: the key's length byte and the key, rounded
    up so that the counts are 8-byte aligned, then the counts."""
    head = (1 + key_bytes + 7) // 8 * 8
    return head, head + 8 * width


class CountTable:
    """Records of a key of at most ``key_bytes`` UTF-8 bytes and ``width`` counts, in memory or,
    given ``path``, in a file mapped into memory. Thread-safe (a lock around each change)."""

    def __init__(self, key_bytes: int, width: int, path: str | None = None) -> None:
        self.key_bytes, self.width, self.path = key_bytes, width, path
        self._head, self.record_size = _layout(key_bytes, width)
        self._counts = struct.Struct(f"<{width}Q")
        self._offsets: dict[str, int] = {}
        self._lock = threading.Lock()
        self._used = 0
        self._file: int | None = None  # made with the first record: a deployment that is one agent has none
        self._buffer: mmap.mmap | bytearray = bytearray(_HEADER.size)
        _HEADER.pack_into(self._buffer, 0, 0, key_bytes, width)

    def __len__(self) -> int:
        return self._used

    def add(self, key: str, index: int, amount: int = 1) -> None:
        """Add ``amount`` to count ``index`` of ``key``'s record (made on first use)."""
        with self._lock:
            offset = self._offsets.get(key)
            if offset is None:
                offset = self._append(key)
            position = offset + self._head + 8 * index
            buffer = self._buffer
            _COUNT.pack_into(buffer, position, _COUNT.unpack_from(buffer, position)[0] + amount)

    def counts(self, key: str) -> tuple[int, ...]:
        """``key``'s counts (zeros when it has no record)."""
        with self._lock:
            offset = self._offsets.get(key)
            if offset is None:
                return (0,) * self.width
            return self._counts.unpack_from(self._buffer, offset + self._head)

    def snapshot(self) -> bytes:
        """The table as its file holds it: header and records in use."""
        with self._lock:
            return bytes(self._buffer[: _HEADER.size + self._used * self.record_size])

    def close(self) -> None:
        """Unmap and close the file (its records stay in it, for the scrapes)."""
        with self._lock:
            if isinstance(self._buffer, mmap.mmap):
                self._buffer.close()
            if self._file is not None:
                os.close(self._file)
                self._file = None

    def _append(self, key: str) -> int:
        encoded = key.encode()
        if len(encoded) > self.key_bytes:
            raise ValueError(f"a key of {len(encoded)} bytes, over this table's {self.key_bytes}")
        offset = _HEADER.size + self._used * self.record_size
        if offset + self.record_size > len(self._buffer):
            self._resize(max(2 * len(self._buffer), _HEADER.size + _FIRST_RECORDS * self.record_size))
        buffer = self._buffer
        buffer[offset] = len(encoded)
        buffer[offset + 1 : offset + 1 + len(encoded)] = encoded
        self._used += 1
        _HEADER.pack_into(buffer, 0, self._used, self.key_bytes, self.width)
        self._offsets[key] = offset
        return offset

    def _resize(self, size: int) -> None:
        if self.path is None:
            assert isinstance(self._buffer, bytearray)
            self._buffer.extend(bytes(size - len(self._buffer)))
            return
        if self._file is None:
            self._file = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        else:
            assert isinstance(self._buffer, mmap.mmap)
            self._buffer.close()
        os.ftruncate(self._file, size)
        self._buffer = mmap.mmap(self._file, size)


def read_records(data: bytes, key_bytes: int, width: int) -> Iterator[tuple[str, tuple[int, ...]]]:
    """The (key, counts) of each record of a table's bytes (a file, or :meth:`CountTable.snapshot`);
    nothing when its layout is not ``key_bytes`` and ``width`` or it is cut short."""
    if len(data) < _HEADER.size:
        return
    used, file_key_bytes, file_width = _HEADER.unpack_from(data, 0)
    if (file_key_bytes, file_width) != (key_bytes, width):
        return
    head, size = _layout(key_bytes, width)
    counts = struct.Struct(f"<{width}Q")
    for offset in range(_HEADER.size, min(len(data), _HEADER.size + used * size) - size + 1, size):
        length = data[offset]
        yield data[offset + 1 : offset + 1 + length].decode(), counts.unpack_from(data, offset + head)


class TenantCounts:
    """One worker's two tables, a tenant's requests by status class and its errors by code, and
    the totals a scrape shows (every worker's, given a multi-process directory)."""

    #: Status classes 1xx to 5xx, the statuses an HTTP application answers with.
    CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
    #: A tenant id (at most 48 characters, ``aap.config.platform.TENANT_ID``); with a code, the
    #: id, a separator and the code (an AAP or JSON-RPC code).
    TENANT_BYTES = 48
    ERROR_KEY_BYTES = 127
    SEPARATOR = "\x1f"

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        # Two apps of one process (two tenants' tests, two agents) each have files of their own.
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.requests = CountTable(self.TENANT_BYTES, len(self.CLASSES), self._path("requests", name))
        self.errors = CountTable(self.ERROR_KEY_BYTES, 1, self._path("errors", name))

    def _path(self, family: str, name: str) -> str | None:
        return os.path.join(self.directory, f"tenant_{family}_{name}{SUFFIX}") if self.directory else None

    def observe(self, tenant: str, status: int, code: str | None) -> None:
        """Count one finished request of ``tenant``, and its error ``code`` if it failed with one.
        (A status outside 100–599, which this application never answers, is not counted here.)"""
        index = status // 100 - 1
        if 0 <= index < len(self.CLASSES):
            self.requests.add(tenant, index)
        if code:
            self.errors.add(tenant + self.SEPARATOR + code, 0)

    def totals(self) -> tuple[dict[str, list[int]], dict[tuple[str, str], int]]:
        """Every tenant's requests by status class and its errors by (tenant, code), summed over
        every worker's tables when there is a multi-process directory, else this process's."""
        requests: dict[str, list[int]] = {}
        errors: dict[tuple[str, str], int] = {}
        for data in self._tables("requests", self.requests):
            for tenant, counts in read_records(data, self.requests.key_bytes, self.requests.width):
                held = requests.setdefault(tenant, [0] * len(counts))
                for i, count in enumerate(counts):
                    held[i] += count
        for data in self._tables("errors", self.errors):
            for key, (count,) in read_records(data, self.errors.key_bytes, 1):
                tenant, _, code = key.partition(self.SEPARATOR)
                errors[(tenant, code)] = errors.get((tenant, code), 0) + count
        return requests, errors

    def exposition(self) -> str:
        """``aap_tenant_requests_total`` and ``aap_tenant_errors_total`` in the text format
        as the library writes it (label names in order, values as floats), written here: a
        line per tenant served, and the library spends several times as long on each."""
        requests, errors = self.totals()
        lines = [
            "# HELP aap_tenant_requests_total HTTP requests by tenant (a platform deployment) and status class.",
            "# TYPE aap_tenant_requests_total counter",
        ]
        for tenant, counts in requests.items():
            label = _label_value(tenant)
            for status, count in zip(self.CLASSES, counts):
                if count:
                    lines.append(f'aap_tenant_requests_total{{status="{status}",tenant="{label}"}} {count}.0')
        lines.append(
            "# HELP aap_tenant_errors_total Failed requests by tenant (a platform deployment) and error code "
            "(AAP code or JSON-RPC code)."
        )
        lines.append("# TYPE aap_tenant_errors_total counter")
        for (tenant, code), count in errors.items():
            lines.append(
                f'aap_tenant_errors_total{{code="{_label_value(code)}",tenant="{_label_value(tenant)}"}} {count}.0'
            )
        lines.append("")
        return "\n".join(lines)

    def _tables(self, family: str, own: CountTable) -> Iterator[bytes]:
        if not self.directory:
            yield own.snapshot()
            return
        for path in sorted(glob.glob(os.path.join(glob.escape(self.directory), f"tenant_{family}_*{SUFFIX}"))):
            try:
                with open(path, "rb") as file:
                    yield file.read()
            except FileNotFoundError:  # the directory was emptied under the scrape
                continue

    def close(self) -> None:
        self.requests.close()
        self.errors.close()


def _label_value(value: str) -> str:
    """``value`` escaped as the text format's label values are (backslash, quote, line feed)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value
