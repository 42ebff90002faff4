"""Dealer feeds as they come: Google and Meta vehicle feeds, provider CSVs, mapping files.

=================  ===================================================================================
``source``         bytes to text: gzip/zip, encodings, delimiters (sniffed)
``records``        text to records: delimited rows, XML listings, with their lines
``transforms``     named cell transforms (money, mileage, dates, VINs, photos, ...)
``mapping``        format tables as data (``*.toml`` here) and mapping files
``convert``        one record to one listing, remembering each value's column
``aap``            the ``aap`` format: JSON Lines or CSV of ``InventoryListing`` objects
``reader``         the whole feed through the one validator (:mod:`aap.inventory.listing_rules`)
``rejects``        the rejects file of a partial import
=================  ===================================================================================

Pure and transport-free: fetching a feed and storing it are other layers' work.
"""

from aap.inventory.formats.mapping import BUILT_IN, FeedFormat, Formats, MappingError, builtin_format, read_mapping
from aap.inventory.formats.reader import FORMATS, FeedReport, ReadOptions, RejectedRow, read_feed_bytes

__all__ = [
    "BUILT_IN",
    "FORMATS",
    "FeedFormat",
    "FeedReport",
    "Formats",
    "MappingError",
    "ReadOptions",
    "RejectedRow",
    "builtin_format",
    "read_feed_bytes",
    "read_mapping",
]
