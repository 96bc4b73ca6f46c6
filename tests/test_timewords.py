"""Time words in retrieval queries: every expression family, the anchors, the negatives and the window invariants."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

import pytest

from agent_memory.cognition.timewords import EventAnchor, TimeQuery, TimeWindow, parse_time_query, without_time_phrases

NOW = datetime(2023, 6, 15, 14, 0, tzinfo=UTC)  # a Thursday


def at(year: int, month: int, day: int, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


def window_of(query: str, now: datetime = NOW) -> tuple[datetime | None, datetime | None]:
    window = parse_time_query(query, now=now).window
    assert window is not None, query
    return window.start, window.end


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what did I do today?", at(2023, 6, 15), at(2023, 6, 16)),
        ("what did I eat yesterday", at(2023, 6, 14), at(2023, 6, 15)),
        ("the day before yesterday", at(2023, 6, 13), at(2023, 6, 14)),
        ("plans for tonight", at(2023, 6, 15), at(2023, 6, 16)),
        ("this morning", at(2023, 6, 15), at(2023, 6, 16)),
        ("this afternoon", at(2023, 6, 15), at(2023, 6, 16)),
        ("this evening", at(2023, 6, 15), at(2023, 6, 16)),
        ("what did we watch last night?", at(2023, 6, 14), at(2023, 6, 15)),
        ("tomorrow", at(2023, 6, 16), at(2023, 6, 17)),
        ("the day after tomorrow", at(2023, 6, 17), at(2023, 6, 18)),
    ],
)
def test_day_words(query: str, start: datetime, end: datetime) -> None:
    assert window_of(query) == (start, end)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("3 days ago", at(2023, 6, 11), at(2023, 6, 14)),  # 12 June, a day either side
        ("three days ago", at(2023, 6, 11), at(2023, 6, 14)),
        ("a day ago", at(2023, 6, 13), at(2023, 6, 16)),
        ("a couple of days ago", at(2023, 6, 12), at(2023, 6, 15)),
        ("a few days ago", at(2023, 6, 11), at(2023, 6, 14)),
        ("twenty days ago", at(2023, 5, 25), at(2023, 5, 28)),
        ("two weeks ago", at(2023, 5, 26), at(2023, 6, 8)),  # the week of 29 May, three days either side
        ("a few weeks ago", at(2023, 5, 19), at(2023, 6, 1)),
        ("a month ago", at(2023, 4, 21), at(2023, 6, 11)),  # May, ten days either side
        ("seven months ago", at(2022, 10, 22), at(2022, 12, 11)),
        ("2 years ago", at(2021, 1, 1), at(2022, 1, 1)),
        ("a year ago", at(2022, 1, 1), at(2023, 1, 1)),
        ("two weekends ago", at(2023, 6, 3), at(2023, 6, 5)),
        ("an hour ago", at(2023, 6, 15, 12), at(2023, 6, 15, 14)),
        ("5 hours ago", at(2023, 6, 15, 8), at(2023, 6, 15, 10)),
    ],
)
def test_ago_widens_with_the_unit(query: str, start: datetime, end: datetime) -> None:
    assert window_of(query) == (start, end)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("last week", at(2023, 6, 5), at(2023, 6, 12)),
        ("this week", at(2023, 6, 12), at(2023, 6, 19)),
        ("next week", at(2023, 6, 19), at(2023, 6, 26)),
        ("last month", at(2023, 5, 1), at(2023, 6, 1)),
        ("this month", at(2023, 6, 1), at(2023, 7, 1)),
        ("next month", at(2023, 7, 1), at(2023, 8, 1)),
        ("last year", at(2022, 1, 1), at(2023, 1, 1)),
        ("this year", at(2023, 1, 1), at(2024, 1, 1)),
        ("next year", at(2024, 1, 1), at(2025, 1, 1)),
        ("last weekend", at(2023, 6, 10), at(2023, 6, 12)),
        ("this weekend", at(2023, 6, 17), at(2023, 6, 19)),
        ("last Saturday", at(2023, 6, 10), at(2023, 6, 11)),
        ("on Monday", at(2023, 6, 12), at(2023, 6, 13)),
        ("last Thursday", at(2023, 6, 8), at(2023, 6, 9)),  # today is Thursday: a week ago
        ("on Friday", at(2023, 6, 9), at(2023, 6, 10)),
        ("this Monday", at(2023, 6, 12), at(2023, 6, 13)),
        ("next Friday", at(2023, 6, 16), at(2023, 6, 17)),
        ("earlier this month", at(2023, 6, 1), NOW),
        ("earlier this year", at(2023, 1, 1), NOW),
        ("earlier this week", at(2023, 6, 12), NOW),
        ("earlier today", at(2023, 6, 15), NOW),
        ("later today", NOW, at(2023, 6, 16)),
        ("what have I been reading recently?", at(2023, 6, 1, 14), NOW),
        ("lately", at(2023, 6, 1, 14), NOW),
    ],
)
def test_calendar_periods(query: str, start: datetime, end: datetime) -> None:
    assert window_of(query) == (start, end)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("the past 3 days", at(2023, 6, 12, 14), NOW),
        ("in the last two weeks", at(2023, 6, 1, 14), NOW),
        ("over the past few days", at(2023, 6, 12, 14), NOW),
        ("the past 6 months", at(2022, 12, 15, 14), NOW),
        ("the past month", at(2023, 5, 15, 14), NOW),
        ("past week", at(2023, 6, 8, 14), NOW),
        ("the last week", at(2023, 6, 8, 14), NOW),  # with "the" it rolls; "last week" alone is the calendar week
        ("the last 2 years", at(2021, 6, 15, 14), NOW),
        ("the past 12 hours", at(2023, 6, 15, 2), NOW),
        ("in the last hour", at(2023, 6, 15, 13), NOW),
        ("the past day", at(2023, 6, 14, 14), NOW),
    ],
)
def test_rolling_spans_end_now(query: str, start: datetime, end: datetime) -> None:
    assert window_of(query) == (start, end)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("earlier this month", at(2024, 1, 1), at(2024, 2, 1)),
        ("earlier this year", at(2024, 1, 1), at(2025, 1, 1)),
        ("earlier today", at(2024, 1, 1), at(2024, 1, 2)),
    ],
)
def test_earlier_at_the_first_instant_is_the_whole_period(query: str, start: datetime, end: datetime) -> None:
    assert window_of(query, at(2024, 1, 1)) == (start, end)


def test_rolling_months_clamp_the_day() -> None:
    now = at(2023, 3, 31, 9)
    assert window_of("the past month", now) == (at(2023, 2, 28, 9), now)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("in May 2023", at(2023, 5, 1), at(2023, 6, 1)),
        ("May 2023", at(2023, 5, 1), at(2023, 6, 1)),
        ("sept 2022", at(2022, 9, 1), at(2022, 10, 1)),
        ("in May", at(2023, 5, 1), at(2023, 6, 1)),
        ("in June", at(2023, 6, 1), at(2023, 7, 1)),  # started before now
        ("in July", at(2022, 7, 1), at(2022, 8, 1)),  # July 2023 has not started yet
        ("during march", at(2023, 3, 1), at(2023, 4, 1)),
        ("the last week of May", at(2023, 5, 1), at(2023, 6, 1)),  # not the past 7 days: falls back to "of May"
        ("last May", at(2023, 5, 1), at(2023, 6, 1)),
        ("last June", at(2022, 6, 1), at(2022, 7, 1)),  # June 2023 has not ended
        ("next May", at(2024, 5, 1), at(2024, 6, 1)),
        ("what about this May?", at(2023, 5, 1), at(2023, 6, 1)),
        ("on 8 May 2023", at(2023, 5, 8), at(2023, 5, 9)),
        ("May 7, 2023", at(2023, 5, 7), at(2023, 5, 8)),
        ("May 7th", at(2023, 5, 7), at(2023, 5, 8)),
        ("the 7th of May", at(2023, 5, 7), at(2023, 5, 8)),
        ("on the 20th of June", at(2022, 6, 20), at(2022, 6, 21)),  # 20 June 2023 is still ahead
        ("on Jan 5", at(2023, 1, 5), at(2023, 1, 6)),
        ("2023-05-07", at(2023, 5, 7), at(2023, 5, 8)),
        ("in 2022", at(2022, 1, 1), at(2023, 1, 1)),
        ("back in 2019", at(2019, 1, 1), at(2020, 1, 1)),
        ("the year 2020", at(2020, 1, 1), at(2021, 1, 1)),
    ],
)
def test_absolute_dates(query: str, start: datetime, end: datetime) -> None:
    assert window_of(query) == (start, end)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("during the summer of 2022", at(2022, 6, 1), at(2022, 9, 1)),
        ("summer 2021", at(2021, 6, 1), at(2021, 9, 1)),
        ("last summer", at(2022, 6, 1), at(2022, 9, 1)),  # this summer is not over
        ("this summer", at(2023, 6, 1), at(2023, 9, 1)),
        ("next summer", at(2024, 6, 1), at(2024, 9, 1)),
        ("in the spring", at(2023, 3, 1), at(2023, 6, 1)),
        ("in the fall", at(2022, 9, 1), at(2022, 12, 1)),
        ("last winter", at(2022, 12, 1), at(2023, 3, 1)),
        ("this winter", at(2023, 12, 1), at(2024, 3, 1)),
        ("the winter of 2020", at(2020, 12, 1), at(2021, 3, 1)),
        ("at the beginning of May 2023", at(2023, 5, 1), at(2023, 5, 11)),
        ("at the end of May 2023", at(2023, 5, 22), at(2023, 6, 1)),
        ("the middle of May 2023", at(2023, 5, 11), at(2023, 5, 21)),
        ("at the end of June 2023", at(2023, 6, 21), at(2023, 7, 1)),
        ("early May", at(2023, 5, 1), at(2023, 5, 11)),
        ("mid-May", at(2023, 5, 11), at(2023, 5, 21)),
        ("the end of last month", at(2023, 5, 22), at(2023, 6, 1)),
        ("the start of this month", at(2023, 6, 1), at(2023, 6, 11)),
        ("early 2022", at(2022, 1, 1), at(2022, 5, 1)),
        ("late 2022", at(2022, 9, 1), at(2023, 1, 1)),
        ("the beginning of the year", at(2023, 1, 1), at(2023, 5, 1)),
        ("the end of May 2030", at(2030, 5, 22), at(2030, 6, 1)),
    ],
)
def test_seasons_and_parts(query: str, start: datetime, end: datetime) -> None:
    assert window_of(query) == (start, end)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("before May 2023", None, at(2023, 5, 1)),
        ("after 2021", at(2022, 1, 1), None),
        ("since 2020", at(2020, 1, 1), None),  # since includes 2020, after does not
        ("until May 2023", None, at(2023, 6, 1)),  # until includes May
        ("prior to 2022", None, at(2022, 1, 1)),
        ("since last week", at(2023, 6, 5), None),
        ("until yesterday", None, at(2023, 6, 15)),
        ("before May", None, at(2023, 5, 1)),
        ("after June 3rd", at(2023, 6, 4), None),
        ("since Monday", at(2023, 6, 12), None),
        ("what did I do before 2023-05-07?", None, at(2023, 5, 7)),
    ],
)
def test_a_connector_before_a_date_opens_the_window(query: str, start: datetime | None, end: datetime | None) -> None:
    assert window_of(query) == (start, end)
    assert parse_time_query(query, now=NOW).anchor is None


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what did we discuss on 05/07/2023?", at(2023, 5, 7), at(2023, 5, 8)),  # month first
        ("31/12/2022", at(2022, 12, 31), at(2023, 1, 1)),  # no 31st month: day first
        ("on 12/25/22", at(2022, 12, 25), at(2022, 12, 26)),
        ("2023/05/07", at(2023, 5, 7), at(2023, 5, 8)),
    ],
)
def test_numeric_dates_go_to_dateparser(query: str, start: datetime, end: datetime) -> None:
    assert window_of(query) == (start, end)


@pytest.mark.parametrize(
    ("query", "phrase", "remainder"),
    [
        ("what did I do in May 2023?", "in May 2023", "what did I do?"),
        ("Yesterday, what did I eat?", "Yesterday", "what did I eat?"),
        ("what  did I   do LAST WEEK  ?", "LAST WEEK", "what did I do?"),
        ("what did we discuss on 05/07/2023?", "on 05/07/2023", "what did we discuss?"),
        ("who did I meet during the summer of 2022 in Rome", "during the summer of 2022", "who did I meet in Rome"),
        ("the day before yesterday I cooked", "the day before yesterday", "I cooked"),
        ("what did I say 3 weeks ago about May?", "3 weeks ago", "what did I say about May?"),
        ("films I watched over the past couple of weeks", "over the past couple of weeks", "films I watched"),
    ],
)
def test_phrase_is_as_written_and_removed_from_the_remainder(query: str, phrase: str, remainder: str) -> None:
    parsed = parse_time_query(query, now=NOW)
    assert parsed.window is not None
    assert parsed.window.phrase == phrase
    assert parsed.remainder == remainder


@pytest.mark.parametrize(
    ("query", "relation", "event", "remainder"),
    [
        ("what did I cook before I moved?", "before", "I moved", "what did I cook?"),
        ("what did I buy after my trip to Japan", "after", "my trip to Japan", "what did I buy"),
        ("friends I made since we got married", "after", "we got married", "friends I made"),
        ("where did I work until I started the new job?", "before", "I started the new job", "where did I work?"),
        ("Since I moved, what have I bought?", "after", "I moved", "what have I bought?"),
        ("what did I read prior to the exam", "before", "the exam", "what did I read"),
        ("what changed after 2021 before I moved", "before", "I moved", "what changed"),
        ("what did I eat before I moved to Berlin in 2020?", "before", "I moved to Berlin in 2020", "what did I eat?"),
    ],
)
def test_event_anchors(query: str, relation: Literal["before", "after"], event: str, remainder: str) -> None:
    parsed = parse_time_query(query, now=NOW)
    assert parsed.anchor == EventAnchor(relation, event)
    assert parsed.remainder == remainder


def test_an_anchor_and_a_window_together() -> None:
    parsed = parse_time_query("what did I buy last year before I moved?", now=NOW)
    assert parsed == TimeQuery(
        window=TimeWindow(at(2022, 1, 1), at(2023, 1, 1), "last year"),
        anchor=EventAnchor("before", "I moved"),
        remainder="what did I buy?",
    )


def test_a_date_inside_the_anchor_belongs_to_the_event() -> None:
    parsed = parse_time_query("what did I eat before I moved to Berlin in 2020?", now=NOW)
    assert parsed.window is None


@pytest.mark.parametrize(
    ("query", "phrase"),
    [
        ("yesterday and last week", "yesterday"),  # the first one
        ("last week, not yesterday", "last week"),
        ("in May 2023", "in May 2023"),  # the longer one at the same place
        ("on 8 May 2023", "on 8 May 2023"),
        ("the day before yesterday", "the day before yesterday"),
    ],
)
def test_the_first_then_longest_phrase_wins(query: str, phrase: str) -> None:
    parsed = parse_time_query(query, now=NOW)
    assert parsed.window is not None
    assert parsed.window.phrase == phrase


@pytest.mark.parametrize(
    "query",
    [
        "May I ask what you like?",
        "you may like this one",
        "this may help with the garden",
        "will this fall over?",
        "did I fall?",
        "when did we meet?",
        "I have 3 cats",
        "what is my favourite colour?",
        "have we talked about this before?",
        "what happened after that",
        "after all, it works",
        "who is my son named after?",
        "who looks after the dog",
        "2022 photos of the garden",
        "upgrade to version 1.5.10",
        "the march through town",
        "early Mayfair",
        "twenty-one days ago",
        "Monday meetings",
        "what did I do on my last day at work?",
        "the last hour of the meeting",
        "",
    ],
)
def test_queries_without_time_words_are_returned_unchanged(query: str) -> None:
    assert parse_time_query(query, now=NOW) == TimeQuery(window=None, anchor=None, remainder=query)


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        parse_time_query("yesterday", now=datetime(2023, 6, 15, 14))


def test_an_aware_now_in_another_zone_counts_days_in_utc() -> None:
    eastern = at(2023, 6, 15, 2).astimezone(timezone(timedelta(hours=-5)))  # still 14 June in New York
    assert parse_time_query("yesterday", now=eastern).window == TimeWindow(
        at(2023, 6, 14), at(2023, 6, 15), "yesterday"
    )
    window = parse_time_query("the past 3 days", now=eastern).window
    assert window == TimeWindow(at(2023, 6, 12, 2), at(2023, 6, 15, 2), "the past 3 days")
    assert window.end is not None and window.end.tzinfo is UTC


PHRASES = [
    "today",
    "yesterday",
    "the day before yesterday",
    "tonight",
    "last night",
    "this morning",
    "3 days ago",
    "an hour ago",
    "two weeks ago",
    "a few months ago",
    "twenty years ago",
    "two weekends ago",
    "last week",
    "this week",
    "next week",
    "last weekend",
    "this weekend",
    "last month",
    "next month",
    "last year",
    "last Saturday",
    "on Sunday",
    "this Sunday",
    "next Monday",
    "earlier this month",
    "earlier this year",
    "earlier this week",
    "later today",
    "recently",
    "the past 3 days",
    "the last couple of months",
    "in May 2023",
    "in May",
    "in January",
    "in December",
    "last February",
    "this March",
    "next November",
    "on 8 May 2023",
    "May 7, 2023",
    "7th of May",
    "on the 1st of January",
    "the 31st of December",
    "the last week of May",
    "2023-05-07",
    "in 2022",
    "during the summer of 2022",
    "last summer",
    "this winter",
    "last winter",
    "next spring",
    "in the autumn",
    "at the beginning of May 2023",
    "at the end of February 2024",
    "mid-December",
    "the end of this year",
    "the beginning of next month",
    "early 2021",
    "late 2021",
    "on 05/07/2023",
]
NOWS = [
    NOW,
    at(2024, 1, 1),  # first instant of a year, a Monday
    at(2024, 2, 29, 23),  # a leap day, late
    at(2023, 12, 31, 23),  # a Sunday, last hour of the year
    at(2023, 3, 31, 12),  # a month longer than the one before it
]


@pytest.mark.parametrize(("query", "now"), list(itertools.product(PHRASES, NOWS)))
def test_every_window_is_non_empty_aware_utc(query: str, now: datetime) -> None:
    window = parse_time_query(query, now=now).window
    assert window is not None, query
    assert window.start is not None and window.end is not None
    assert window.start < window.end
    assert window.start.tzinfo is UTC and window.end.tzinfo is UTC
    assert window.end - window.start <= timedelta(days=400)


def test_till_date_is_not_an_event() -> None:
    parsed = parse_time_query("How many tournaments has John organized till date?", now=NOW)
    assert parsed.anchor is None and parsed.window is None


def test_every_time_phrase_leaves_the_words_grep_searches() -> None:
    now = datetime(2023, 1, 1, tzinfo=UTC)
    rest = parse_time_query("What did John achieve recently in September 2022?", now=now, anchors=False).remainder
    assert "2022" in rest  # the time layer took "recently" only
    assert without_time_phrases(rest, now=now) == "What did John achieve?"
    assert without_time_phrases("the TP1334 flight", now=now) == "the TP1334 flight"


def test_the_first_window_is_found_without_reading_every_match() -> None:
    """Each rule stops at its first match the builder takes, or at one that cannot come first: the same window as
    sorting every match of every rule (leftmost, longest, earlier rule) and taking the first the builder takes,
    over texts with several phrases, refused ones ("this may help", "31 June") and none."""
    import random

    from agent_memory.cognition import timewords

    def every_match(text: str) -> tuple[tuple[int, int], TimeWindow] | None:
        found = [(m, i) for i, rule in enumerate(timewords._RULES) for m in rule.pattern.finditer(text)]
        for match, index in sorted(found, key=lambda f: (f[0].start(), -len(f[0][0]), f[1])):
            window = timewords._window(timewords._RULES[index], match, NOW)
            if window is not None:
                return match.span(), window
        return None

    phrases = ["last May", "in 2021", "before March 3rd, 2022", "two weeks ago", "yesterday", "this weekend",
               "on 31 June", "this may help", "since the summer of 2020", "on Monday", "in early June", "next Friday",
               "prior to last year", "a few months ago", "at the end of 2019", "may I ask", "in may"]  # fmt: skip
    words = list(itertools.repeat("and", 3)) + ["we", "met", "the", "team", "about", "the", "plan", "to", "cook"]
    rng, found = random.Random(4), 0
    for _ in range(400):
        text = words[:]
        for _ in range(rng.randint(0, 4)):
            text.insert(rng.randrange(len(text) + 1), rng.choice(phrases))
        query = " ".join(text)
        expected = every_match(query)
        assert timewords._first_window(query, NOW) == expected, query
        found += expected is not None
    assert 200 < found < 400
