"""Time words in a retrieval query ("last week", "in May 2023", "before I moved") turned into a window or an anchor.

Each rule is a regex plus a builder, run only if the query holds one of its trigger words (so most queries cost one
tokenisation). The leftmost match wins, the longest on a tie ("in May 2023" beats "in May"), and a builder may refuse
its match ("May I ask" is not a month). Numeric dates ("05/07/2023") go to dateparser, imported only when needed.
Weeks start on Monday; a weekend is Saturday and Sunday; seasons are northern meteorological ones (the winter of
2022 is December 2022 to February 2023). A month, season or day without a year is the latest that started by `now`.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal


@dataclass(frozen=True, slots=True)
class TimeWindow:
    start: datetime | None  # aware UTC, inclusive; None = open
    end: datetime | None  # aware UTC, exclusive; None = open
    phrase: str  # the text of the query that produced it, as written


@dataclass(frozen=True, slots=True)
class EventAnchor:
    relation: Literal["before", "after"]  # "before I moved" -> ("before", "I moved")
    event: str


@dataclass(frozen=True, slots=True)
class TimeQuery:
    window: TimeWindow | None
    anchor: EventAnchor | None
    remainder: str  # the query with the time phrase removed (whitespace tidied), for keyword search


_Bounds = tuple[datetime | None, datetime | None]
_Span = tuple[datetime, datetime]


@dataclass(frozen=True, slots=True)
class _Rule:
    triggers: frozenset[str]  # words one of which the query must hold before the pattern is worth running
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str], datetime], _Bounds | None]


# Spelt out rather than taken from `calendar`, whose names follow the process locale.
_NUMBER_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
_NUMBER_WORDS += ["thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
_NUMBERS = {"a": 1, "an": 1, "a couple of": 2, "couple of": 2, "a few": 3, "few": 3}
_NUMBERS |= {word: value for value, word in enumerate(_NUMBER_WORDS, 1)}
_MONTH_NAMES = ["january", "february", "march", "april", "may", "june"]
_MONTH_NAMES += ["july", "august", "september", "october", "november", "december"]
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_SEASON_START = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
_DAY_SHIFTS = {"the day before yesterday": -2, "yesterday": -1, "last night": -1, "tomorrow": 1}
_DAY_SHIFTS["the day after tomorrow"] = 2
_SHIFTS = {"last": -1, "this": 0, "next": 1}
_PARTS = {"beginning": 0, "start": 0, "early": 0, "middle": 1, "mid": 1, "end": 2, "late": 2}


def _alternation(words: Iterable[str]) -> str:
    """Longest first, so "a couple of" wins over "a" and "september" over "sep"."""
    return "|".join(sorted((w.replace(" ", r"\s+") for w in words), key=len, reverse=True))


_NUM = rf"(?<!-)(?P<n>\d{{1,3}}|{_alternation(_NUMBERS)})"  # not "one" of "twenty-one"
_MONTH = rf"(?P<month>{_alternation(_MONTH_NAMES + [m[:3] for m in _MONTH_NAMES] + ['sept'])})"
_WEEKDAY = rf"(?P<weekday>{_alternation(_WEEKDAYS)})"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_OPT_YEAR = rf"(?:,?\s+{_YEAR}\b)?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_REL = r"(?P<rel>last|this|next)"
# Every rule may be led by a connector ("before May 2023" is an open window) and a preposition, both kept in the
# phrase so that the remainder reads cleanly ("what did I do in May?" -> "what did I do?").
_PREFIX = (
    r"(?:\b(?P<conn>before|after|since|until|till|prior\s+to)\s+)?"
    r"(?:\b(?P<prep>back\s+in|in|on|during|at|from|over|throughout|for|within)\s+)?"
)
_CONTEXT_PREPS = frozenset({"in", "back in", "during", "from", "over", "throughout"})


def _number(text: str) -> int:
    return int(text) if text.isdigit() else _NUMBERS[" ".join(text.lower().split())]


def _word(match: re.Match[str], group: str) -> str:
    """A group lower-cased with its inner whitespace collapsed; "" when the group did not take part."""
    return " ".join((match[group] or "").lower().split())


def _is_verb(match: re.Match[str], group: str) -> bool:
    """After "this", May and fall are verbs ("this may help") unless they end the clause ("what about this May?")."""
    after = match.string[match.end() :]
    return _word(match, "rel") == "this" and _word(match, group) in ("may", "fall") and bool(re.match(r"\s*\w", after))


def _has_context(match: re.Match[str]) -> bool:
    """Whether a connector or a dating preposition leads the match: "in May", "since 2020", not "May I"."""
    return bool(match["conn"]) or _word(match, "prep") in _CONTEXT_PREPS


def _days(first: date, count: int = 1) -> _Span:
    start = datetime.combine(first, time(), UTC)
    return start, start + timedelta(days=count)


def _month_start(year: int, month: int, shift: int = 0) -> datetime:
    years, index = divmod(year * 12 + month - 1 + shift, 12)
    return datetime(years, index + 1, 1, tzinfo=UTC)


def _months(year: int, month: int, count: int = 1) -> _Span:
    """`count` calendar months from the start of `month`, which may run past 12 or below 1."""
    return _month_start(year, month), _month_start(year, month, count)


def _months_before(now: datetime, count: int) -> datetime:
    """`now` moved back `count` calendar months, the day clamped to the month's length (31 March -> 28 February)."""
    first = _month_start(now.year, now.month, -count)
    last_day = calendar.monthrange(first.year, first.month)[1]
    return now.replace(year=first.year, month=first.month, day=min(now.day, last_day))


def _period(unit: str, now: datetime, shift: int = 0) -> _Span:
    """The calendar day, week, weekend, month or year holding `now`, moved by `shift` of its own length."""
    today = now.date()
    if unit == "day":
        return _days(today + timedelta(days=shift))
    if unit in ("week", "weekend"):
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=shift)
        return _days(monday + timedelta(days=5), 2) if unit == "weekend" else _days(monday, 7)
    return _months(now.year, now.month + shift) if unit == "month" else _months(now.year + shift, 1, 12)


def _pick(spans: Iterable[_Span], relation: str, now: datetime) -> _Span | None:
    """Which occurrence of a yearly span ("May", "summer", "7 May") a relation word means."""
    spans = sorted(spans)
    if relation == "next":
        return next((s for s in spans if s[0] > now), None)
    if relation == "last":
        return max((s for s in spans if s[1] <= now), default=None)
    if relation == "this":
        current = [s for s in spans if s[0] <= now < s[1]] or [s for s in spans if s[0].year == now.year]
        return current[0] if current else None
    return max((s for s in spans if s[0] <= now), default=None)


def _yearly(now: datetime, span: Callable[[int], _Span]) -> list[_Span]:
    return [span(year) for year in range(now.year - 2, now.year + 3)]


def _latest(now: datetime, span: Callable[[int], _Span]) -> _Span | None:
    return _pick(_yearly(now, span), "", now)


def _build_day_word(match: re.Match[str], now: datetime) -> _Bounds:
    """Parts of a day get the whole calendar day: the user's own time zone is unknown anyway."""
    return _period("day", now, _DAY_SHIFTS.get(_word(match, "word"), 0))


def _build_ago(match: re.Match[str], now: datetime) -> _Bounds:
    """A point in the past widened by a tolerance that grows with the unit: people round "three weeks ago"."""
    count, unit = _number(match["n"]), _word(match, "unit")
    if unit == "hour":
        return now - timedelta(hours=count + 1), now - timedelta(hours=count - 1)
    start, end = _period(unit, now, -count)
    slack = timedelta(days={"day": 1, "week": 3, "month": 10}.get(unit, 0))
    return start - slack, end + slack


def _build_calendar(match: re.Match[str], now: datetime) -> _Bounds:
    return _period(_word(match, "unit"), now, _SHIFTS[_word(match, "rel")])


def _build_rolling(match: re.Match[str], now: datetime) -> _Bounds | None:
    """Rolling spans up to now ("the past 3 days", "the last week"); "last week" alone is `_build_calendar`'s."""
    count, unit = _number(match["n"] or "1"), _word(match, "unit")
    if count == 0 or not (match["n"] or match["the"] or _word(match, "which") == "past"):  # not "my last day"
        return None
    if unit in ("month", "year"):
        return _months_before(now, count * (12 if unit == "year" else 1)), now
    return now - count * {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}[unit], now


def _build_earlier(match: re.Match[str], now: datetime) -> _Bounds:
    """The part of this day, week, month or year before or after now; all of it when that part is empty."""
    start, end = _period(_word(match, "unit") or "day", now)
    if _word(match, "which") == "earlier":
        return start, now if now > start else end
    return now, end


def _build_weekday(match: re.Match[str], now: datetime) -> _Bounds | None:
    """Both "on Monday" and "last Monday" mean the latest Monday before today; a bare "Monday" is often a habit."""
    relation = _word(match, "rel")
    if not (relation or match["conn"] or _word(match, "prep") == "on"):
        return None
    weekday, today = _WEEKDAYS.index(_word(match, "weekday")), now.date()
    if relation == "this":
        return _days(today + timedelta(days=weekday - today.weekday()))
    if relation == "next":
        return _days(today + timedelta(days=(weekday - today.weekday()) % 7 or 7))
    return _days(today - timedelta(days=(today.weekday() - weekday) % 7 or 7))


def _month_number(match: re.Match[str]) -> int:
    name = _word(match, "month")
    return int(name) if name.isdigit() else [m[:3] for m in _MONTH_NAMES].index(name[:3]) + 1


def _build_month(match: re.Match[str], now: datetime) -> _Bounds | None:
    """A month without a year needs context: "in May" and "last May" are months, "May I ask" is not."""
    relation, month = _word(match, "rel"), _month_number(match)
    if match["year"]:
        return _months(int(match["year"]), month)
    if not (relation or match["of"] or _has_context(match)) or _is_verb(match, "month"):
        return None
    return _pick(_yearly(now, lambda year: _months(year, month)), relation, now)


def _build_date(match: re.Match[str], now: datetime) -> _Bounds | None:
    """A day such as "8 May 2023", "May 7th", "7th of May" or "2023-05-07"; without a year, the latest one so far."""
    month, day = _month_number(match), int(match["day"])
    if match["year"]:
        return _days(date(int(match["year"]), month, day))
    return _latest(now, lambda year: _days(date(year, month, day)))


def _build_year(match: re.Match[str], now: datetime) -> _Bounds | None:
    """A bare year needs context too: "in 2022" is a time, "2022 photos" may be a count."""
    if not (match["ctx"] or _has_context(match)):
        return None
    return _months(int(match["year"]), 1, 12)


def _build_season(match: re.Match[str], now: datetime) -> _Bounds | None:
    relation, first = _word(match, "rel"), _SEASON_START[_word(match, "season")]
    if match["year"]:
        return _months(int(match["year"]), first, 3)
    if not (relation or _has_context(match)) or _is_verb(match, "season"):
        return None
    return _pick(_yearly(now, lambda year: _months(year, first, 3)), relation, now)


def _build_part(match: re.Match[str], now: datetime) -> _Bounds | None:
    """Beginning, middle or end: the first, middle or last ten days of a month, or a third of a year."""
    part, shift = _PARTS[_word(match, "part") or _word(match, "part2")], _SHIFTS.get(_word(match, "rel"), 0)
    if match["yonly"] or _word(match, "unit") == "year":
        return _months(int(match["yonly"]) if match["yonly"] else now.year + shift, 1 + 4 * part, 4)
    if match["unit"]:
        whole: _Span | None = _period("month", now, shift)
    else:
        month = _month_number(match)
        whole = _months(int(match["year"]), month) if match["year"] else _latest(now, lambda y: _months(y, month))
    if whole is None:
        return None
    (start, end), ten = whole, timedelta(days=10)
    return (start + part * ten, start + (part + 1) * ten) if part < 2 else (end - ten, end)


def _build_numeric(match: re.Match[str], now: datetime) -> _Bounds | None:
    """Numeric dates: dateparser reads 05/07/2023 month-first but 31/12/2022 day-first, where a rule would guess."""
    from dateparser.date import DateDataParser  # ~0.2 s to import, paid only by queries holding a numeric date

    settings = {"RELATIVE_BASE": now.replace(tzinfo=None), "PREFER_DATES_FROM": "past"}
    found = DateDataParser(languages=["en"], settings=settings).get_date_data(match["date"]).date_obj
    return None if found is None else _days(found.date())


def _rule(triggers: str, body: str, build: Callable[[re.Match[str], datetime], _Bounds | None]) -> _Rule:
    return _Rule(frozenset(triggers.split()), re.compile(_PREFIX + body, re.I), build)


_DIGITS = "0 1 2 3 4 5 6 7 8 9"
_MONTH_WORDS = " ".join(_MONTH_NAMES + [m[:3] for m in _MONTH_NAMES] + ["sept"])
_RULES = [
    _rule(
        "today tonight tomorrow yesterday night morning afternoon evening",
        r"\b(?P<word>the\s+day\s+(?:before\s+yesterday|after\s+tomorrow)|yesterday|today|tonight|tomorrow|last\s+night"
        r"|this\s+(?:morning|afternoon|evening))\b",
        _build_day_word,
    ),
    _rule("ago", rf"\b{_NUM}\s+(?P<unit>hour|day|week|weekend|month|year)s?\s+ago\b", _build_ago),
    _rule("week weekend month year", rf"\b{_REL}\s+(?P<unit>week|weekend|month|year)\b(?!\s+of\b)", _build_calendar),
    _rule(
        "past last",
        rf"\b(?P<the>the\s+)?(?P<which>past|last)\s+(?:{_NUM}\s+)?(?P<unit>hour|day|week|month|year)s?\b(?!\s+of\b)",
        _build_rolling,
    ),
    _rule(
        "earlier later", r"\b(?P<which>earlier|later)\s+(?:this\s+(?P<unit>week|month|year)|today)\b", _build_earlier
    ),
    _rule("recently lately", r"\b(?:recently|lately)\b", lambda _, now: (now - timedelta(days=14), now)),
    _rule(" ".join(_WEEKDAYS), rf"\b(?:(?P<rel>last|this|next|past)\s+)?{_WEEKDAY}\b", _build_weekday),
    _rule(_MONTH_WORDS, rf"\b(?:{_REL}\s+|(?P<of>of)\s+)?{_MONTH}\b(?:\s+{_YEAR}\b)?", _build_month),
    _rule(_MONTH_WORDS, rf"\b(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}\b{_OPT_YEAR}", _build_date),
    _rule(_MONTH_WORDS, rf"\b{_MONTH}\s+(?:the\s+)?{_DAY}\b{_OPT_YEAR}", _build_date),
    _rule(_DIGITS, r"\b(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})(?![\w-])", _build_date),
    _rule(_DIGITS, rf"\b(?P<ctx>the\s+year\s+)?{_YEAR}\b(?![-/.]\d)", _build_year),
    _rule(
        " ".join(_SEASON_START),
        rf"\b(?:{_REL}\s+|the\s+)?(?P<season>spring|summer|autumn|fall|winter)\b(?:\s+(?:of\s+)?{_YEAR}\b)?",
        _build_season,
    ),
    _rule(
        " ".join(_PARTS),
        r"\b(?:(?:the\s+)?(?P<part>beginning|start|middle|end)\s+of\s+|(?P<part2>early|mid|late)[\s-]+)"
        rf"(?:(?P<rel>last|this|next|the)\s+(?P<unit>month|year)|{_MONTH}{_OPT_YEAR}|(?P<yonly>(?:19|20)\d\d))\b",
        _build_part,
    ),
    _rule(
        _DIGITS,
        r"(?<![\w./-])(?P<date>\d{1,2}[/.-]\d{1,2}[/.-]\d{4}|\d{1,2}/\d{1,2}/\d\d|\d{4}/\d{1,2}/\d{1,2})(?![\w/-]|\.\d)",
        _build_numeric,
    ),
]
_TOKEN = re.compile(r"[a-z]+|\d")
_CONNECTOR = re.compile(r"\b(?P<conn>before|after|since|until|till|prior\s+to)\s+(?=(?P<event>[^?.!,;:]+))", re.I)
_VAGUE_EVENTS = frozenset(
    {"all", "that", "this", "it", "then", "now", "which", "them", "me", "you", "us", "date", "today", "present"}
)
_PHRASAL = re.compile(r"\b(?:named|look|looks|looked|looking|take|takes|took|taking)\s+$", re.I)


def _open_ended(connector: str, bounds: _Bounds) -> _Bounds:
    """A window led by a connector: "before May" ends where May starts, "since May" and "until May" include May."""
    start, end = bounds
    kept = {"before": (None, start), "prior to": (None, start), "after": (end, None), "since": (start, None)}
    return kept.get(connector) or ((None, end) if connector else bounds)


def _window(rule: _Rule, match: re.Match[str], now: datetime) -> TimeWindow | None:
    try:
        bounds = rule.build(match, now)
    except ValueError:  # an impossible date such as 31 June, or a year out of range
        bounds = None
    return None if bounds is None else TimeWindow(*_open_ended(_word(match, "conn"), bounds), match[0])


def _first_window(text: str, now: datetime) -> tuple[tuple[int, int], TimeWindow] | None:
    """Leftmost match first, longest on a tie, the earlier rule on a tie of both; a match its builder refuses gives
    way to the next one.

    A rule's regex runs only when the query holds one of its trigger words, so most queries cost one tokenisation.
    Each rule's matches come leftmost first, so a rule stops at its first match the builder takes, or at the first
    that could not come before the best so far: a long text with a time phrase early is not read to its end.
    """
    words = set(_TOKEN.findall(text.lower()))
    best: tuple[tuple[int, int, int], tuple[int, int], TimeWindow] | None = None
    for index, rule in enumerate(_RULES):
        if rule.triggers.isdisjoint(words):
            continue
        for match in rule.pattern.finditer(text):
            key = (match.start(), -len(match[0]), index)
            if best is not None and key >= best[0]:
                break
            window = _window(rule, match, now)
            if window is not None:
                best = (key, match.span(), window)
                break
    return (best[1], best[2]) if best is not None else None


def _is_dated(text: str, position: int, now: datetime) -> bool:
    """Whether the connector at `position` leads a date ("before May 2023") rather than an event."""
    matches = ((rule, rule.pattern.match(text, position)) for rule in _RULES)
    return any(m is not None and m["conn"] and _window(rule, m, now) is not None for rule, m in matches)


def _find_anchor(query: str, now: datetime) -> tuple[tuple[int, int], EventAnchor] | None:
    """The first connector that leads an event: "before I moved", not "before May", "after all" or "named after"."""
    for match in _CONNECTOR.finditer(query):
        event = match["event"].strip()
        vague = event.lower() in _VAGUE_EVENTS or _PHRASAL.search(query, 0, match.start()) is not None
        if vague or _is_dated(query, match.start(), now):
            continue
        relation: Literal["before", "after"] = "after" if _word(match, "conn") in ("after", "since") else "before"
        return (match.start(), match.start("event") + len(event)), EventAnchor(relation, event)
    return None


def _without(query: str, spans: Iterable[tuple[int, int]]) -> str:
    for start, end in sorted(spans, reverse=True):
        query = f"{query[:start]} {query[end:]}"
    return re.sub(r"\s+(?=[?.!,;:])", "", " ".join(query.split())).strip(" ,;:")


def without_time_phrases(text: str, *, now: datetime, most: int = 4) -> str:
    """`text` without any of its time phrases (up to `most`): grep's words. The time layer takes one phrase as its
    window; a second one ("recently, in September 2022") is no literal to find in the log either."""
    spans: list[tuple[int, int]] = []
    masked = text
    for _ in range(most):
        found = _first_window(masked, now.astimezone(UTC))
        if found is None:
            break
        (start, end), _ = found
        spans.append((start, end))
        masked = masked[:start] + "\x00" * (end - start) + masked[end:]
    return _without(text, spans) if spans else text


def parse_time_query(query: str, *, now: datetime, anchors: bool = True) -> TimeQuery:
    """The time window and event anchor a query asks for, relative to `now`, and the query without them.

    The anchor is found first and hidden from the window search: in "before I moved in 2020" the year dates the
    event, not the memories wanted. Then the leftmost time phrase of the rest becomes the window. With `anchors`
    false no event anchor is read: "before we give up on it" is then plain words, and only a time expression
    ("before May 2023") makes a window.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be an aware datetime (UTC), got naive {now.isoformat()}")
    now = now.astimezone(UTC)
    anchored = _find_anchor(query, now) if anchors else None
    cut_start, cut_end = anchored[0] if anchored else (0, 0)
    masked = query[:cut_start] + "\x00" * (cut_end - cut_start) + query[cut_end:]
    windowed = _first_window(masked, now)
    if anchored is None and windowed is None:
        return TimeQuery(window=None, anchor=None, remainder=query)
    spans = [found[0] for found in (anchored, windowed) if found is not None]
    window, anchor = (windowed[1] if windowed else None), (anchored[1] if anchored else None)
    return TimeQuery(window=window, anchor=anchor, remainder=_without(query, spans))
