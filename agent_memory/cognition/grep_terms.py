"""The parts of a query worth an exact search of the raw log: quotes, numbers, identifiers and proper names.

Embeddings blur exactly these (a PIN, a file name, a version, a full name), while the keyword layer already
covers ordinary words, so plain lowercase words and single capitalised words are left out. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

MAX_TERMS = 8
MAX_QUOTE_CHARS = 200

# Quoted text: a single quote opens and closes only at a word boundary, so "don't" and "dogs'" never pair up.
_QUOTED = re.compile(
    rf'"(?P<dq>[^"\n]{{2,{MAX_QUOTE_CHARS}}})"'
    rf"|“(?P<cq>[^”\n]{{2,{MAX_QUOTE_CHARS}}})”"
    rf"|(?<!\w)'(?P<sq>[^'\n]{{2,{MAX_QUOTE_CHARS}}})'(?!\w)"
    rf"|(?<!\w)‘(?P<csq>[^’\n]{{2,{MAX_QUOTE_CHARS}}})’(?!\w)"
)
# Candidates, tried in this order at each position; each is then judged by its kind.
_CANDIDATE = re.compile(
    r"(?P<url>\b(?:https?|ftp)://[^\s<>\"'“”]+|\bwww\.[^\s<>\"'“”]+)"
    r"|(?P<email>\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+)"
    r"|(?P<handle>(?<![\w@#])[@#]\w[\w.-]*)"
    r"|(?P<number>[$€£¥]?\d(?:[\d,.:/-]*\d)?(?:%|(?i:[ap]m))?(?![\w/]))"
    r"|(?P<path>(?:~|\.{1,2})?/[\w.@+~-]+(?:/[\w.@+~-]+)*/?|[A-Za-z]:\\[\w.\\-]+|[\w.-]+(?:/[\w.@+~-]+)+)"
    r"|(?P<word>\w+(?:[.'’-]\w+)*)"
)
_NUMBER = re.compile(
    r"[$€£¥]?\d{1,3}(?:,\d{3})+(?:\.\d+)?%?"  # 1,000 and $1,250.50
    r"|[$€£¥]\d+(?:\.\d+)?%?|\d+(?:\.\d+)?%"  # $20, 10%
    r"|\d+(?:\.\d+)+|\d{2,}"  # 3.14, 1.2.3, 4921, 2024 (a lone digit says too little)
    r"|\d{1,2}(?::\d{2}){0,2}(?i:[ap]m)|\d{1,2}(?::\d{2}){1,2}"  # 10:30, 10:30pm, 7am
    r"|\d+(?:[/-]\d+)+"  # 2024-03-01, 3/14/2024, 555-1234
)
_PATH_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,8}$")
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z]{2,}[a-z]{2,}")
_TRAILING = ".,;:!?)]}>'\"’”-"
_POSSESSIVE = re.compile(r"['’]s$")

_NAME_WORD = re.compile(r"[^\W\d_][\w'’&-]*")
_CONNECTORS = frozenset(("of", "the", "de", "da", "di", "du", "del", "della", "van", "von", "der", "den", "la", "le"))
# Words that start a sentence without starting a name: "Did Alice Smith call?" names Alice Smith, not "Did ...".
_OPENERS = frozenset(
    ("a", "an", "the", "this", "that", "these", "those", "my", "our", "your", "his", "her", "their", "its")
    + ("it", "i", "we", "you", "he", "she", "they", "me", "us", "them", "any", "all", "some", "every")
    + ("what", "when", "where", "who", "whom", "whose", "why", "how", "which", "anything", "everything")
    + ("did", "do", "does", "is", "are", "was", "were", "am", "be", "been", "have", "has", "had")
    + ("can", "could", "would", "should", "will", "shall", "may", "might", "must")
    + ("tell", "show", "find", "give", "list", "remind", "remember", "recall", "please")
    + ("hey", "hi", "hello", "ok", "okay", "yes", "no", "so", "and", "but", "or", "if", "then", "also", "just")
    + ("about", "in", "on", "at", "for", "from", "to", "with", "by", "after", "before", "since", "during")
    + ("yesterday", "today", "tomorrow", "tonight", "last", "next")
)


def grep_terms(query: str, *, names: bool = True) -> list[str]:
    """Exact-search terms of `query` in the order they appear, case-insensitively unique, at most MAX_TERMS; with
    `names` false, full names are not among them (their words are then no term either)."""
    masked, found = _take_quotes(query)
    names_found = list(_names(masked))
    if names:
        found += names_found
    taken = [(start, start + len(term)) for start, term in names_found]
    found += [(start, term) for start, term in _candidates(masked) if not _inside(start, taken)]
    return _unique(term for _, term in sorted(found, key=lambda item: item[0]))


def _take_quotes(query: str) -> tuple[str, list[tuple[int, str]]]:
    """Quoted text, and the query with each quote blanked out (same length) so nothing inside is found twice."""
    found: list[tuple[int, str]] = []
    pieces: list[str] = []
    last = 0
    for match in _QUOTED.finditer(query):
        text = next(group for group in match.groups() if group is not None).strip()
        if len(text) >= 2:
            found.append((match.start(), text))
            pieces += [query[last : match.start()], "\0" * (match.end() - match.start())]
            last = match.end()
    return "".join([*pieces, query[last:]]), found


def _candidates(text: str) -> Iterator[tuple[int, str]]:
    for match in _CANDIDATE.finditer(text):
        kind, raw = match.lastgroup, match.group()
        term = raw.rstrip(_TRAILING) if kind in ("url", "handle", "path") else raw
        if kind == "word":
            term = _POSSESSIVE.sub("", term)
        if len(term) >= 2 and _KEEP[kind or "word"](term):
            yield match.start(), term


def _is_number(term: str) -> bool:
    return _NUMBER.fullmatch(term) is not None


def _is_path(term: str) -> bool:
    """A rooted path, or a relative one with a file extension or two slashes ("and/or" and "km/h" are not)."""
    if term.startswith(("/", "~/", "./", "../")) or term[1:3] == ":\\":
        return True
    return term.count("/") >= 2 or _PATH_EXTENSION.search(term) is not None


def _is_identifier(term: str) -> bool:
    """snake_case, camelCase/CamelCase, letters mixed with digits (B-52, v2.1, iPhone15), dotted names (foo.bar)."""
    if "_" in term or _CAMEL.search(term):
        return True
    if any(c.isdigit() for c in term):
        return any(c.isalpha() for c in term) or _is_number(term)
    return "." in term and any(len(part) >= 2 for part in term.split("."))


_KEEP: dict[str, Callable[[str], bool]] = {
    "url": lambda term: True,
    "email": lambda term: True,
    "handle": lambda term: True,
    "number": _is_number,
    "path": _is_path,
    "word": _is_identifier,
}


def _names(text: str) -> Iterator[tuple[int, str]]:
    """Runs of two or more capitalised words ("Golden Gate Bridge", "Bank of America"), minus a sentence opener."""
    run: list[re.Match[str]] = []
    for match in _NAME_WORD.finditer(text):
        if run and _continues(text, run[-1], match):
            run.append(match)
            continue
        yield from _name_of(text, run)
        run = [match] if _is_capitalised(match.group()) else []
    yield from _name_of(text, run)


def _is_capitalised(word: str) -> bool:
    return word[0].isupper() and word.lower() not in ("i", "i'm", "i’m", "i've", "i'll", "i'd")


def _continues(text: str, previous: re.Match[str], word: re.Match[str]) -> bool:
    """`word` extends the run ending at `previous`: one space apart, and capitalised or a connector like "of"."""
    if text[previous.end() : word.start()] != " ":
        return False
    if _is_capitalised(word.group()):
        return True
    if word.group() == "the" and previous.group() == "of":  # Bank of the West
        return True
    return word.group() in _CONNECTORS and _is_capitalised(previous.group())


def _name_of(text: str, run: list[re.Match[str]]) -> Iterator[tuple[int, str]]:
    while run and run[-1].group() in _CONNECTORS:
        run = run[:-1]
    if run and _starts_sentence(text, run[0].start()):
        while run and (run[0].group().lower() in _OPENERS or run[0].group() in _CONNECTORS):
            run = run[1:]
    if sum(_is_capitalised(m.group()) for m in run) >= 2:
        name = _POSSESSIVE.sub("", text[run[0].start() : run[-1].end()])
        yield run[0].start(), name


def _starts_sentence(text: str, start: int) -> bool:
    before = text[:start].rstrip()
    return not before or before[-1] in ".!?:;\n"


def _inside(start: int, spans: list[tuple[int, int]]) -> bool:
    return any(low <= start < high for low, high in spans)


def _unique(terms: Iterator[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for term in terms:
        key = term.casefold()
        if key not in seen:
            seen.add(key)
            out.append(term)
            if len(out) == MAX_TERMS:
                break
    return out
