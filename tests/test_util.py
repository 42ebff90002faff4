"""The small concepts of ``aap.util``, each against a simple reference.

- ``rfc3339``: the parser accepts exactly the strings the request validator's ``date-time``
  accepts (the seed's grammar, docs/seeds.md "Timestamps"), and reads each one to the moment a
  reference computed from its parts names; what is written reads back.
- ``pointer``: building then reading a pointer gives the tokens back, whatever they hold.
- ``memo``: a sequence of operations gives what a plain ordered dict with the same bound gives;
  a value is made once per key however many callers want it, and a caller wanting one key never
  waits while another key is being made.
- ``backoff``: the doubling delay equals ``min(cap, base × 2^(attempt−1))`` in exact arithmetic.

Property tests are bounded by example counts; the threaded tests wait on events, never on time
(a join's timeout only turns a hang into a failure).
"""

from __future__ import annotations

import calendar
import threading
from collections import OrderedDict
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rfc3339_validator import validate_rfc3339

from aap.spec.formats import is_date_time as validator_date_time
from aap.util import backoff, memo, pointer, rfc3339

PROPERTY = settings(max_examples=150, deadline=None)

# -- rfc3339 ------------------------------------------------------------------------------------


@st.composite
def date_times(draw: st.DrawFn) -> tuple[str, int | None]:
    """A string in the shape of a date-time, mostly valid, and the epoch microseconds a
    reference computes from its parts (None when a part is out of range)."""
    year = draw(st.integers(0, 9999))
    month = draw(st.integers(0, 13))
    day = draw(st.integers(0, 32))
    hour, minute, second = draw(st.integers(0, 24)), draw(st.integers(0, 60)), draw(st.integers(0, 60))
    fraction = draw(st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=12)))
    offset = draw(
        st.one_of(
            st.sampled_from(["Z", "z"]),
            st.tuples(st.sampled_from("+-"), st.integers(0, 24), st.integers(0, 60)),
        )
    )
    separator = draw(st.sampled_from(["T", "t"]))
    text = f"{year:04d}-{month:02d}-{day:02d}{separator}{hour:02d}:{minute:02d}:{second:02d}"
    text += f".{fraction}" if fraction else ""
    shift = 0
    if isinstance(offset, tuple):
        sign, oh, om = offset
        text += f"{sign}{oh:02d}:{om:02d}"
        shift = (1 if sign == "+" else -1) * (oh * 3600 + om * 60)
        if oh > 23 or om > 59:
            return text, None
    else:
        text += offset
    if not (1 <= year and 1 <= month <= 12 and hour <= 23 and minute <= 59 and second <= 59):
        return text, None
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return text, None
    days = (datetime(year, month, day) - datetime(1970, 1, 1)).days
    micros = int((fraction + "000000")[:6]) if fraction else 0
    return text, ((days * 24 + hour) * 60 + minute) * 60 * 1_000_000 + (second - shift) * 1_000_000 + micros


DATE_ALPHABET = st.sampled_from(list("0123456789-:T.Zz+ t\n"))


@PROPERTY
@given(date_times())
def test_a_date_time_reads_to_the_moment_its_parts_name(case: tuple[str, int | None]) -> None:
    text, expected = case
    if expected is None:
        assert rfc3339.parse_rfc3339(text) is None
        with pytest.raises(ValueError):
            rfc3339.epoch_us(text)
    else:
        assert rfc3339.epoch_us(text) == expected
        assert rfc3339.parse_rfc3339(text).tzinfo is not None


@PROPERTY
@given(st.one_of(st.text(DATE_ALPHABET, max_size=32), date_times().map(lambda case: case[0])))
def test_the_parser_accepts_exactly_what_the_validator_accepts(text: str) -> None:
    """One grammar: the request validator's ``date-time`` (rfc3339-validator, upper-cased)."""
    by_library = not text.endswith("\n") and bool(validate_rfc3339(text.upper()))
    assert validator_date_time(text) is by_library
    assert rfc3339.is_date_time(text) is by_library
    assert (rfc3339.parse_rfc3339(text) is not None) is by_library


OFFSETS = st.integers(-1439, 1439).map(lambda minutes: timezone(timedelta(minutes=minutes)))


@PROPERTY
@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=OFFSETS))
def test_what_is_written_reads_back(moment: datetime) -> None:
    z = rfc3339.to_utc_z(moment)
    assert z.endswith("Z") and rfc3339.is_date_time(z)
    assert rfc3339.parse_rfc3339(z) == moment.replace(microsecond=0)
    assert rfc3339.parse_rfc3339(rfc3339.to_rfc3339(moment)) == moment
    local = rfc3339.to_local(moment, timezone(timedelta(hours=-7)))
    assert local.endswith("-07:00") and rfc3339.parse_rfc3339(local) == moment.replace(microsecond=0)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("2026-04-30T10:15:30Z", True),
        ("2026-04-30t10:15:30.123456789z", True),
        ("2026-05-03T11:00:00-07:00", True),
        ("2024-02-29T00:00:00Z", True),
        ("2016-12-31T23:59:60Z", False),  # rfc3339-validator declines leap seconds
        ("2026-04-30 10:15:30Z", False),
        ("2026-04-30T10:15:30", False),  # the offset is mandatory
        ("2026-04-30T10:15Z", False),
        ("2026-04-30T10:15:30+0100", False),
        ("2026-04-30T10:15:30Z\n", False),
        ("0000-01-01T00:00:00Z", False),
    ],
)
def test_the_grammar_at_its_edges(text: str, ok: bool) -> None:
    assert (rfc3339.parse_rfc3339(text) is not None) is ok


def test_the_z_forms() -> None:
    moment = datetime(2026, 5, 3, 11, 0, 0, 250_000, tzinfo=timezone(timedelta(hours=-7)))
    assert rfc3339.to_utc_z(moment) == "2026-05-03T18:00:00Z"
    assert rfc3339.to_rfc3339(moment) == "2026-05-03T11:00:00.250000-07:00"
    assert rfc3339.to_rfc3339(moment.astimezone(UTC)) == "2026-05-03T18:00:00.250000Z"
    assert rfc3339.ms_to_utc_z(1_777_831_200_999) == "2026-05-03T18:00:00Z"
    assert rfc3339.epoch_ms(moment) == 1_777_831_200_250
    assert rfc3339.parse_rfc3339(rfc3339.now_utc_z()) is not None
    with pytest.raises(ValueError):
        rfc3339.to_rfc3339(datetime(2026, 5, 3))  # no offset, no RFC 3339 form
    assert rfc3339.parse_rfc3339(20260503) is None


# -- pointer ------------------------------------------------------------------------------------

TOKENS = st.lists(st.one_of(st.text(st.sampled_from("a/~01b"), max_size=6), st.integers(0, 20)), max_size=6)


@PROPERTY
@given(TOKENS)
def test_a_pointer_reads_back_to_its_tokens(path: list[str | int]) -> None:
    built = pointer.build(path)
    assert pointer.tokens(built) == [str(token) for token in path]
    assert built.count("/") == len(path)  # every "/" inside a token is escaped


def test_pointer_escaping_follows_rfc_6901() -> None:
    assert pointer.build(["a/b", "m~n", 0]) == "/a~1b/m~0n/0"
    assert pointer.tokens("/~01") == ["~1"]  # "~0" is read after "~1": not "/"
    assert pointer.tokens("") == []
    assert pointer.tokens("/") == [""]
    with pytest.raises(ValueError):
        pointer.tokens("filters/make")


# -- memo ---------------------------------------------------------------------------------------

OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["get", "peek", "put", "discard"]), st.integers(0, 6), st.integers()), max_size=40
)


@PROPERTY
@given(OPERATIONS, st.integers(1, 4), st.booleans())
def test_a_memo_behaves_like_a_bounded_ordered_dict(ops: list[tuple[str, int, int]], kept: int, lru: bool) -> None:
    subject: memo.Memo[int, int] = memo.Memo(kept, lru=lru)
    reference: OrderedDict[int, int] = OrderedDict()
    made: list[int] = []
    expected_made: list[int] = []

    def keep(key: int, value: int) -> None:
        reference[key] = value
        reference.move_to_end(key)
        while len(reference) > kept:
            reference.popitem(last=False)

    for op, key, value in ops:
        if op == "get":
            expected = reference.get(key)
            if expected is None:
                expected = value
                keep(key, value)
                expected_made.append(key)
            elif lru:
                reference.move_to_end(key)
            assert subject.get(key, lambda v=value, k=key: made.append(k) or v) == expected
        elif op == "peek":
            assert subject.peek(key) == reference.get(key)
            if lru and key in reference:
                reference.move_to_end(key)
        elif op == "put":
            subject.put(key, value)
            keep(key, value)
        else:
            subject.discard(key)
            reference.pop(key, None)
        assert len(subject) == len(reference) and all(k in subject for k in reference)
    assert made == expected_made


def _thread(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_one_maker_per_key_and_other_keys_never_wait() -> None:
    subject: memo.Memo[str, str] = memo.Memo(8)
    making_a, release_a = threading.Event(), threading.Event()
    calls: list[str] = []
    results: dict[str, str] = {}

    def make_a() -> str:
        calls.append("a")
        making_a.set()
        assert release_a.wait(30)
        return "A"

    first = _thread(lambda: results.__setitem__("first", subject.get("a", make_a)))
    assert making_a.wait(30)
    # While "a" is being made: another key is made and answered at once, on this thread...
    assert subject.get("b", lambda: "B") == "B"
    # ...and a second caller of "a" waits for the first one's value instead of making it.
    second = _thread(lambda: results.__setitem__("second", subject.get("a", lambda: calls.append("again") or "?")))
    second.join(0.05)
    assert second.is_alive() and "second" not in results
    release_a.set()
    first.join(30)
    second.join(30)
    assert results == {"first": "A", "second": "A"} and calls == ["a"]


def test_a_failure_is_neither_kept_nor_shared() -> None:
    subject: memo.Memo[str, str] = memo.Memo(2)
    making, release = threading.Event(), threading.Event()
    outcomes: dict[str, object] = {}

    def failing() -> str:
        making.set()
        assert release.wait(30)
        raise LookupError("the maker's own failure")

    def first() -> None:
        try:
            subject.get("k", failing)
        except LookupError as exc:
            outcomes["first"] = exc

    one = _thread(first)
    assert making.wait(30)
    two = _thread(lambda: outcomes.__setitem__("second", subject.get("k", lambda: "made by the second")))
    release.set()
    one.join(30)
    two.join(30)
    assert isinstance(outcomes["first"], LookupError)
    assert outcomes["second"] == "made by the second" and subject.peek("k") == "made by the second"


def test_a_value_that_asks_for_itself_is_refused() -> None:
    subject: memo.Memo[str, str] = memo.Memo(2)
    with pytest.raises(RuntimeError):
        subject.get("k", lambda: subject.get("k", lambda: "never"))
    assert "k" not in subject
    with pytest.raises(ValueError):
        memo.Memo(0)


# -- backoff ------------------------------------------------------------------------------------


@PROPERTY
@given(st.integers(-3, 200), st.fractions(Fraction(1, 100), 86_400), st.fractions(Fraction(1, 100), 7 * 86_400))
def test_the_delay_doubles_up_to_the_cap(attempt: int, base: Fraction, cap: Fraction) -> None:
    exact = min(cap, base * 2 ** max(attempt - 1, 0))
    assert backoff.doubling(attempt, float(base), float(cap)) == pytest.approx(float(exact), rel=1e-12)


@pytest.mark.parametrize(
    ("token", "index"),
    [("0", True), ("7", True), ("10", True), ("01", False), ("", False), ("²", False), ("١", False), ("-1", False)],
)
def test_array_indexes_are_ascii_digits(token: str, index: bool) -> None:
    assert pointer.is_index(token) is index


def test_problem_order_reads_only_ascii_indexes() -> None:
    """A filter named "²" (a digit to ``str.isdigit``, not to ``int``) once made the problem list
    of a request an INTERNAL_ERROR; its pointer sorts as a name."""
    from aap.spec.validator import problem_order

    problems = [
        {"instanceLocation": "/filters/²", "keyword": "additionalProperties", "error": "x"},
        {"instanceLocation": "/filters/10", "keyword": "type", "error": "x"},
        {"instanceLocation": "/filters/9", "keyword": "type", "error": "x"},
    ]
    assert [p["instanceLocation"] for p in sorted(problems, key=problem_order)] == [
        "/filters/9",
        "/filters/10",
        "/filters/²",
    ]


def test_a_superscript_digit_is_no_number_anywhere() -> None:
    """``"²".isdigit()`` holds and ``int("²")`` raises: a Retry-After header or a feed cell of
    such digits is no number (the client waits its own backoff, the cell is a row problem)."""
    from aap.client.transport import retry_after_ms
    from aap.inventory.formats.transforms import TransformError, integer

    assert retry_after_ms({"retry-after": "²"}) is None
    with pytest.raises(TransformError):
        integer("²", None, None)
