"""The fast paths of the format checks give the full grammars' verdicts (aap.spec.formats).

``is_uri`` and ``is_date_time`` first try a conservative subset of their grammar (the form
feeds and agents nearly always send) and answer from the full check otherwise: a value the
subset accepts must be valid by the full grammar, and every verdict must equal the full
check's, for generated values of both kinds and for arbitrary text.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rfc3339_validator import validate_rfc3339
from rfc3986_validator import validate_rfc3986

from aap.spec.formats import _PLAIN_HTTP_URI, is_date_time, is_uri
from aap.util.rfc3339 import PLAIN_DATE_TIME as _PLAIN_DATE_TIME

PROPERTY = settings(max_examples=300, deadline=None)


def full_uri(value: str) -> bool:
    return not value.endswith("\n") and bool(validate_rfc3986(value, rule="URI"))


def full_date_time(value: str) -> bool:
    return not value.endswith("\n") and bool(validate_rfc3339(value.upper()))


@pytest.mark.slow
@PROPERTY
@given(st.from_regex(_PLAIN_HTTP_URI, fullmatch=True))
def test_every_plain_http_uri_is_a_uri(value: str) -> None:
    assert full_uri(value)
    assert is_uri(value)


@pytest.mark.slow
@PROPERTY
@given(st.from_regex(_PLAIN_DATE_TIME, fullmatch=True))
def test_every_plain_date_time_is_a_date_time(value: str) -> None:
    assert full_date_time(value)
    assert is_date_time(value)


URI_ALPHABET = st.sampled_from(list("htps:/?#%@[]!$&'()*+,;=-._~ aZ09\n\u00e9"))
DATE_ALPHABET = st.sampled_from(list("0123456789-:T.Zz+ t\n"))


@PROPERTY
@given(
    st.one_of(
        st.text(URI_ALPHABET, max_size=40),
        st.builds(lambda tail: "https://" + tail, st.text(URI_ALPHABET, max_size=30)),
    )
)
def test_uri_verdicts_equal_the_full_grammar(value: str) -> None:
    assert is_uri(value) == full_uri(value)


@pytest.mark.slow
@PROPERTY
@given(
    st.one_of(
        st.text(DATE_ALPHABET, max_size=30),
        st.builds(
            lambda a, b: a + b, st.from_regex(_PLAIN_DATE_TIME, fullmatch=True), st.text(DATE_ALPHABET, max_size=3)
        ),
    )
)
def test_date_time_verdicts_equal_the_full_grammar(value: str) -> None:
    assert is_date_time(value) == full_date_time(value)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("https://cdn.dealer.example/1hgcv1f30na123456/1.jpg", True),
        ("http://127.0.0.1:8000/a2a?x=1&y=2", True),
        ("https://dealer.example/a%20b", True),  # percent-encoding: the full grammar says yes
        ("https://dealer.example/a%zz", False),  # and no
        ("https://dealer.example/#photos", True),
        ("https://exa mple.example/", False),
        ("mailto:sales@dealer.example", True),
        ("/relative/path", False),
        ("https://dealer.example/\n", False),
    ],
)
def test_uri_examples(value: str, valid: bool) -> None:
    assert is_uri(value) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("2025-01-15T00:00:00Z", True),
        ("2025-01-15T10:30:00.123456-07:00", True),
        ("2024-02-29T00:00:00Z", True),  # a leap day: the full check
        ("2025-02-29T00:00:00Z", False),
        ("2025-04-31T00:00:00Z", False),
        ("0000-01-01T00:00:00Z", False),
        ("2025-01-15t00:00:00z", True),  # lower case: the full check upper-cases
        ("2025-01-15T00:00:00", False),  # no offset
        ("2025-01-15T24:00:00Z", False),
        ("2025-01-15T00:00:00Z\n", False),
    ],
)
def test_date_time_examples(value: str, valid: bool) -> None:
    assert is_date_time(value) is valid
