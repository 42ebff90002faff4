"""A tenant's inventory uploaded through the provisioning API: what an upload asks for, as the
import pipeline takes it (:mod:`aap.feeds.job`, the one that ``aap import --tenant ID`` runs).

An upload is a feed file in any format ``aap import`` reads (docs/feeds.md), as the request's
body; the format is detected from the content as ``aap import`` detects it, or named by the
``format`` query parameter. Its other query parameters are the options of ``aap import`` that
make sense without a file system: ``dealer_id``, ``rooftop``, ``dry_run``, ``skip_invalid``,
``strict``, ``allow_shrink``, ``allow_field_loss`` (each flag ``true`` or ``false``). No
mapping file and no credentials: those would name files or secrets of the platform host.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aap.config.model import Settings
from aap.feeds.job import ImportRequest

#: The media types an upload may have, and the file name suffix each gives its feed (the name
#: only breaks a tie: the reader looks at the content first, gzip and zip included).
MEDIA_TYPES = {
    "application/x-ndjson": ".jsonl",
    "application/jsonl": ".jsonl",
    "application/json": ".jsonl",
    "text/csv": ".csv",
    "text/tab-separated-values": ".tsv",
    "text/plain": ".csv",
    "application/xml": ".xml",
    "text/xml": ".xml",
    "application/gzip": ".gz",
    "application/zip": ".zip",
    "application/octet-stream": "",
}
#: The ``format`` values (``jsonl`` and ``csv`` are the aap format, as for ``aap import``).
FORMATS = ("aap", "google-vehicle", "meta-vehicle", "dealer-csv", "jsonl", "csv")
FLAGS = ("dry_run", "skip_invalid", "strict", "allow_shrink", "allow_field_loss")
TEXTS = ("format", "dealer_id", "rooftop")
#: The longest text parameter (a dealer id, a rooftop's name).
MAX_TEXT = 200
#: What the import history says started an upload's import.
TRIGGER = "api"


@dataclass(frozen=True)
class Upload:
    """What an upload asks for (its query and media type, checked)."""

    name: str  # the feed's name in the history: "upload" and the media type's suffix
    format: str | None = None
    dealer_id: str | None = None
    rooftop: str | None = None
    encoding: str | None = None
    dry_run: bool = False
    skip_invalid: bool = False
    strict: bool = False
    allow_shrink: bool = False
    allow_field_loss: bool = False


def media_problem(content_type: str) -> str | None:
    """Why an upload's ``Content-Type`` is not one this API reads, or None."""
    media = content_type.split(";")[0].strip().lower()
    if media in MEDIA_TYPES:
        return None
    return f"the body must be a feed file, of one of the media types {', '.join(MEDIA_TYPES)}"


def upload_of(params: Iterable[tuple[str, str]], content_type: str) -> tuple[Upload | None, list[str]]:
    """The upload a request asks for, or None and every problem of its query at once."""
    problems: list[str] = []
    seen: dict[str, str] = {}
    for name, value in params:
        if name not in FLAGS and name not in TEXTS:
            problems.append(f"{name[:100]}: not a parameter of this request (parameters: {', '.join(TEXTS + FLAGS)})")
        elif name in seen:
            problems.append(f"{name}: given more than once")
        else:
            seen[name] = value
    flags: dict[str, bool] = {}
    for name in FLAGS:
        value = seen.get(name, "false")
        if value not in ("true", "false"):
            problems.append(f"{name}: must be true or false")
        flags[name] = value == "true"
    texts: dict[str, str | None] = {}
    for name in TEXTS:
        text = seen.get(name)
        if text is not None and not (0 < len(text) <= MAX_TEXT):
            problems.append(f"{name}: 1 to {MAX_TEXT} characters")
        texts[name] = text
    fmt = texts["format"]
    if fmt is not None and fmt not in FORMATS:
        problems.append(f"format: one of {', '.join(FORMATS)}")
    if problems:
        return None, problems
    media, _, rest = content_type.partition(";")
    encoding = None
    for parameter in rest.split(";"):
        key, _, value = parameter.strip().partition("=")
        if key.strip().lower() == "charset" and value.strip():
            encoding = value.strip().strip('"')[:40]
    upload = Upload(
        name="upload" + MEDIA_TYPES.get(media.strip().lower(), ""),
        format="aap" if fmt in ("jsonl", "csv") else fmt,
        dealer_id=texts["dealer_id"],
        rooftop=texts["rooftop"],
        encoding=encoding,
        **flags,
    )
    return upload, []


def import_request(
    upload: Upload, body: bytes, settings: Settings, *, replace: bool
) -> tuple[ImportRequest, list[str]]:
    """The import of ``body`` as ``upload`` asks, for the tenant of ``settings``; and the problems
    of the upload its settings show (a rooftop it does not have)."""
    problems = []
    if upload.rooftop is not None:
        names = {r["name"] for p in settings.all_profiles() for r in p.rooftops}
        if upload.rooftop not in names:
            problems.append(f"rooftop: {upload.rooftop!r} is not one of the tenant's rooftops")
    request = ImportRequest(
        source=upload.name,
        trigger=TRIGGER,
        format=upload.format,
        encoding=upload.encoding,
        dealer_id=upload.dealer_id,
        replace=replace,
        partial=upload.skip_invalid,
        strict=upload.strict,
        dry_run=upload.dry_run,
        max_removed_share=None if upload.allow_shrink else 0.5,
        rooftop=upload.rooftop,
        allow_field_loss=upload.allow_field_loss,
        body=body,
    )
    return request, problems
