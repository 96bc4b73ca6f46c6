"""Facts a speaker states about themselves, found without an LLM (issue #20): first-person statements of a name,
a job and an employer, where they live or moved, their relationships, pets, likes and dislikes, allergies, and plans
with a date. Pure: no I/O; the caller resolves "I" to the speaker (the subject it passes in).

Conservative on purpose: only the speaker's own affirmative statements. A question, a hypothetical ("if I", "I
would", "maybe"), a negation ("I don't live in ...") or a value that is only a pronoun yields nothing; a value is
cut at the end of its clause. Each candidate says which rule found it, so a decision can be explained.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from agent_memory.cognition.timewords import parse_time_query


@dataclass(frozen=True, slots=True)
class Candidate:
    subject: str
    attribute: str
    value: str
    rule: str
    valid_at: datetime | None = None  # a date the statement names ("I moved to Porto on May 1"), when it names one
    evidence: str | None = None  # the words that state it, when the extractor quotes them (the LLM's does)


RELATIONS = [
    "wife",
    "husband",
    "partner",
    "girlfriend",
    "boyfriend",
    "fiance",
    "fiancee",
    "sister",
    "brother",
    "mother",
    "mom",
    "mum",
    "father",
    "dad",
    "son",
    "daughter",
    "friend",
    "best",
    "friend",
    "boss",
    "roommate",
    "cousin",
    "aunt",
    "uncle",
    "grandmother",
    "grandma",
    "grandfather",
    "grandpa",
]
PETS = ["dog", "cat", "puppy", "kitten", "parrot", "rabbit", "hamster", "horse", "turtle", "fish"]
MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_VALUE = r"(?P<value>[^,.;!?]+?)"
_TIME_TAIL = rf"\s+(?:since|last|next|this|every|in\s+(?:\d|{'|'.join(MONTHS)})|on\s+(?:\d|the\s|{'|'.join(MONTHS)}))"
_END = rf"(?=\s*(?:[,.;!?]|\s+(?:and|but|because|so|which|who|where|when|with|now|today|again|anymore|still)\b|{_TIME_TAIL}|$))"
_NAME = r"(?P<value>[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+){0,2})"
_WHEN = r"(?:\s+(?P<when>(?:on|in|since|last|next|this)\s+[^,.;!?]+?))?"
_AT = r"(?:\s+(?:at|for)\s+(?P<employer>[^,.;!?]+?))?"
RULES: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (rule, attribute, re.compile(pattern, re.IGNORECASE if not rule.startswith("name") else 0))
    for rule, attribute, pattern in (
        ("name", "name", rf"\b(?:[Mm]y name is|[Cc]all me)\s+{_NAME}"),
        ("job", "job", rf"\bI (?:work|am working) as (?:an? )?{_VALUE}{_AT}{_END}"),
        ("job-is", "job", rf"\bmy (?:job|profession|occupation) is (?:an? )?{_VALUE}{_END}"),
        ("employer", "employer", rf"\bI (?:work|am working|started working) (?:at|for) {_VALUE}{_END}"),
        ("lives", "lives in", rf"\bI (?:live|am living|now live) in {_VALUE}{_WHEN}{_END}"),
        ("moved", "lives in", rf"\bI (?:just )?(?:moved|relocated) to {_VALUE}{_WHEN}{_END}"),
        ("from", "from", rf"\bI(?: am|'m) (?:originally )?from {_VALUE}{_END}"),
        ("allergy", "allergic to", rf"\bI(?: am|'m) (?:very |severely )?allergic to {_VALUE}{_END}"),
        ("likes", "likes", rf"\bI (?:really )?(?:love|like|enjoy|adore) {_VALUE}{_END}"),
        ("dislikes", "dislikes", rf"\bI (?:really )?(?:hate|dislike|can't stand|cannot stand|detest) {_VALUE}{_END}"),
        ("plan", "plans", rf"\bI(?: am|'m) (?:going|planning|about) to {_VALUE}{_WHEN}{_END}"),
    )
)
RELATION_RULE = re.compile(
    rf"\b[Mm]y (?P<relation>{'|'.join(sorted(RELATIONS, key=len, reverse=True))})"
    rf"(?:'s name is|,| is called| is named| named| is)\s+{_NAME}"
)
PET_RULE = re.compile(  # case-sensitive: a pet's name is capitalised, and "who" after it is not part of it
    rf"\b(?:[Mm]y (?P<kind>{'|'.join(PETS)})(?:'s name is|,| is called| is named| named)\s+|"
    rf"I have an? (?P<kind2>{'|'.join(PETS)}) (?:called|named) ){_NAME}"
)
HEDGES = re.compile(
    r"\b(?:if|would|could|might|maybe|perhaps|wish|hope|thinking about|wonder|think|guess|suppose)\b", re.IGNORECASE
)
NEGATION = re.compile(r"\b(?:not|never|don't|do not|didn't|no longer|isn't|wasn't)\b", re.IGNORECASE)
PRONOUNS = frozenset(
    ["it", "that", "this", "them", "him", "her", "you", "there", "here", "so", "too", "one", "ones", "things", "stuff"]
)
CLAUSE_WORDS = frozenset(["that", "this", "it", "when", "how", "what", "because", "if", "whether"])
"""A value that opens with one of these is a clause ("I hate that this keeps happening"), not a thing."""
SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")


def extract(text: str, *, subject: str, now: datetime) -> list[Candidate]:
    """The facts `subject` states about themselves in `text`, one candidate per rule match, in order."""
    found: list[Candidate] = []
    for sentence in SENTENCES.split(text):
        sentence = sentence.strip()
        if not sentence or sentence.endswith("?"):
            continue
        found += _from_sentence(sentence, subject, now)
    return _unique(found)


def _from_sentence(sentence: str, subject: str, now: datetime) -> list[Candidate]:
    found = []
    for rule, attribute, pattern in RULES:
        for match in pattern.finditer(sentence):
            if _hedged(sentence, match.start()):
                continue
            value = _clean(match.group("value"))
            if value is None:
                continue
            when = match.groupdict().get("when")
            found.append(Candidate(subject, attribute, value, rule, _date(when, now) if when else None))
            if (employer := _clean(match.groupdict().get("employer"))) is not None:
                found.append(Candidate(subject, "employer", employer, rule))
    for match in RELATION_RULE.finditer(sentence):
        if not _hedged(sentence, match.start()) and (value := _clean(match.group("value"))):
            relation = match.group("relation").lower()
            found.append(Candidate(subject, "friend" if relation == "best friend" else relation, value, "relation"))
    for match in PET_RULE.finditer(sentence):
        if not _hedged(sentence, match.start()) and (name := _clean(match.group("value"))):
            kind = (match.group("kind") or match.group("kind2")).lower()
            found.append(Candidate(subject, "has pet", f"{kind} {name}", "pet"))
    return found


def _hedged(sentence: str, start: int) -> bool:
    """A hypothetical, an opinion or a negation in the clause before the match takes the statement back (a negation
    inside one, "I don't live in", never matches a rule)."""
    before = sentence[max(0, start - 40) : start]
    return bool(HEDGES.search(before) or NEGATION.search(before))


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    value = re.sub(r"\s+", " ", value).strip(" '\"")
    words = value.lower().split()
    if not words or len(words) > 8 or all(w in PRONOUNS for w in words) or words[0] in CLAUSE_WORDS:
        return None
    return value


def _date(phrase: str, now: datetime) -> datetime | None:
    window = parse_time_query(phrase, now=now).window
    return window.start if window is not None and window.start is not None else None


def _unique(found: Sequence[Candidate]) -> list[Candidate]:
    seen: set[tuple[str, str]] = set()
    kept = []
    for candidate in found:
        key = (candidate.attribute, candidate.value.lower())
        if key not in seen:
            seen.add(key)
            kept.append(candidate)
    return kept
