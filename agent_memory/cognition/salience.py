"""What in a turn is worth remembering, read from its text alone: the features of the offline save decision.

Pure and deterministic (regular expressions over the text, no model), so the heuristic decides in microseconds,
the same way on every machine, and its inputs can be logged beside the decision for a learned policy to train
on. The manager adds what the text cannot say by itself: emotion, novelty against the store, retrieval gaps.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from agent_memory.models import MemoryType

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*|\d[\d.,:/-]*")
_NUMBER = re.compile(r"(?<![A-Za-z])\d+(?:[.,:/-]\d+)*")
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend"
_TIME = re.compile(
    rf"\b(?:{_MONTHS}|{_DAYS}|yesterday|today|tonight|tomorrow|ago|last (?:week|month|year|night)|"
    r"next (?:week|month|year)|this (?:morning|evening|week|month|year)|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|my|me|mine|we|we're|we've|our|us)\b", re.IGNORECASE)
_PREFERENCE = re.compile(
    r"\b(?:i|we) (?:really |absolutely |just |also |kind of |kinda )?(?:like|love|enjoy|prefer|hate|dislike|adore|"
    r"can't stand|cannot stand|don't like|do not like|am into|'m into|am a fan|'m a fan)\b|"
    r"\bmy (?:favou?rite|go-to)\b|\bi'?m (?:allergic|vegetarian|vegan)\b|\bi (?:would rather|'d rather)\b",
    re.IGNORECASE,
)
_PLAN = re.compile(
    r"\b(?:i|we)(?:'m| am|'re| are)? (?:going to|gonna|planning|plan to|hoping to|about to|thinking of|"
    r"will|'ll|need to|have to|want to|decided|intend|scheduled|signed up|booked)\b|"
    r"\b(?:i|we)'ll\b|\b(?:deadline|appointment|reservation|interview|due)\b",
    re.IGNORECASE,
)
_SELF_FACT = re.compile(
    r"\b(?:i|we)(?:'m| am|'re| are) (?:a|an|from|in|at|the|currently|still|now)\b|"
    r"\b(?:i|we) (?:work|live|study|teach|grew up|was born|have|own|moved|use|run|volunteer|belong)\b|"
    r"\bmy (?:name|job|work|wife|husband|partner|kid|kids|son|daughter|mom|mum|dad|mother|father|sister|brother|"
    r"friend|boss|team|dog|cat|family|home|house|birthday|doctor|company|address|email|phone)\b|"
    r"\b(?:born|allergic|diagnosed|married|divorced|pregnant|retired|graduated)\b",
    re.IGNORECASE,
)
_EVENT = re.compile(
    r"\b(?:i|we|my \w+)(?: just| finally| recently| actually| also)? (?:went|got|did|saw|met|started|finished|"
    r"visited|bought|made|took|had|joined|won|lost|left|moved|tried|found|learned|read|watched|painted|wrote|"
    r"built|ran|adopted|passed|quit|began|created|received|signed|launched|travel(?:l)?ed|attended|"
    r"\w+ed)\b|"
    r"\b(?:i|we)(?:'ve| have)(?: just| finally| recently| already| also| never)? (?:been|done|seen|won|gone|run|"
    r"made|taken|begun|read|bought|got|gotten|found|met|had|left|lost|written|built|kept|given|flown|driven|"
    r"eaten|grown|become|\w+ed)\b",
    re.IGNORECASE,
)
_PROCEDURE = re.compile(
    r"^\s*(?:always|never|make sure|remember to|don't forget|do not forget|please remember|to \w+ .{0,40}, )|"
    r"\bstep \d|\bfirst,? .{0,80}\bthen\b|`[^`]+`|```|\b(?:run|install|set|use|press|hold|click|type) "
    r"(?:the |a |`)?[\w./-]+",
    re.IGNORECASE | re.MULTILINE,
)
_REACTION = re.compile(
    r"^\s*(?:wow|whoa|omg|aw+|yay|congrat\w*|haha\w*|lol|that(?:'s| is| sounds| was) (?:so |really |super )?"
    r"(?:great|awesome|amazing|cool|nice|wonderful|fantastic|incredible|impressive|lovely|sweet|fun|"
    r"exciting|interesting|tough|hard|rough|sad|good)|sounds (?:great|good|fun|amazing|awesome|lovely)|"
    r"good luck|glad|so happy for you|i'?m (?:so )?(?:happy|glad|proud) (?:for|of) you|you(?:'re| are) "
    r"(?:so |really )?(?:doing|amazing|awesome|right|welcome)|thanks?\b|thank you|no problem|of course|"
    r"absolutely|totally|exactly|agreed|i (?:agree|see|understand)|me too|same here|nice|cool|great)\b",
    re.IGNORECASE,
)
_BOILERPLATE = re.compile(
    r"\b(?:let me know if|hope (?:this|that) helps|happy to help|feel free to|i'?m here (?:to|for)|"
    r"great question|as an ai|i don'?t have personal|i'?m just an ai|is there anything else|"
    r"i can help (?:you )?with|here are some (?:tips|ideas|suggestions|options))\b",
    re.IGNORECASE,
)
_FOLD = str.maketrans(
    {chr(c): chr(c + 32) for c in range(ord("A"), ord("Z") + 1)} | {"İ": "i", "ı": "i", "ſ": "s", "\u212a": "k"}
)
"""The characters Python's `re` matches to an ASCII letter when it ignores case (A-Z, and four more: found by
trying every code point), each made that letter; every other character is left as it is."""
_COUNTED_FOLDED = {  # text_features counts these on the text folded by _FOLD, each compiled without IGNORECASE: the
    # same matches (every pattern is ASCII and lower-case; \w, \b and \d mean the same on the folded text) in
    # about half the time, since Python's engine finds no literal to jump to in a case-blind alternation
    name: re.compile(pattern.pattern, pattern.flags & ~re.IGNORECASE)
    for name, pattern in {
        "time": _TIME,
        "first_person": _FIRST_PERSON,
        "preference": _PREFERENCE,
        "plan": _PLAN,
        "self_fact": _SELF_FACT,
        "event": _EVENT,
        "procedure": _PROCEDURE,
        "boilerplate": _BOILERPLATE,
    }.items()
}
_NOT_NAMES = frozenset(
    [
        "I",
        "I'm",
        "I've",
        "I'd",
        "I'll",
        "OK",
        "Ok",
        "Hey",
        "Hi",
        "Hello",
        "Wow",
        "Oh",
        "Yes",
        "No",
        "Yeah",
        "Thanks",
        "Thank",
        "Congrats",
        "Congratulations",
        "Haha",
        "Lol",
        "Sure",
        "Well",
        "So",
        "And",
        "But",
        "Or",
        "The",
        "A",
        "An",
        "It",
        "It's",
        "That",
        "That's",
        "This",
        "What",
        "When",
        "Where",
        "Why",
        "How",
        "Who",
        "Which",
        "Do",
        "Did",
        "Does",
        "Are",
        "Is",
        "Was",
        "Were",
        "Have",
        "Has",
        "Had",
        "Can",
        "Could",
        "Would",
        "Should",
        "Will",
        "You",
        "You're",
        "Your",
        "We",
        "We're",
        "Our",
        "They",
        "Their",
        "He",
        "She",
        "His",
        "Her",
        "My",
        "Me",
        "Let",
        "Please",
        "Good",
        "Great",
        "Awesome",
        "Amazing",
        "Nice",
        "Cool",
        "Sounds",
        "Hope",
        "Glad",
        "Absolutely",
        "Totally",
        "Also",
        "Just",
        "Really",
        "Yep",
        "Yup",
        "Nope",
        "Omg",
        "Aw",
        "Aww",
        "Anyway",
        "Btw",
        "Maybe",
        "Here",
        "There",
        "Not",
        "Don't",
        "Definitely",
        "Love",
        "Like",
    ]
)


@dataclass(frozen=True, slots=True)
class TextFeatures:
    """Counts and flags read from a turn's text; every field is a number so it can be logged and learned from."""

    words: int
    names: int
    numbers: int
    time_refs: int
    first_person: int
    preference: int
    plan: int
    self_fact: int
    event: int
    procedure: int
    question_share: float
    reaction_share: float
    boilerplate: int

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


_SPEAKER = re.compile(r"^\s*[A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,2}:\s+")
_DATED = re.compile(r"^\s*\[[^\]\n]{1,40}\]\s*")  # a merged memory's first part: "[6 Jul] Caroline: ..."
_GREETING = frozenset(
    [
        "Hey",
        "Hi",
        "Hello",
        "Thanks",
        "Thank",
        "Congrats",
        "Congratulations",
        "Bye",
        "Morning",
        "Dear",
        "Yo",
        "Wow",
        "Oh",
    ]
)


_ABBREVIATION = re.compile(r"\b(Dr|Mr|Mrs|Ms|Mx|Prof|St|Jr|Sr|Mt|vs|etc|approx|No)\.", re.IGNORECASE)


def text_features(text: str) -> TextFeatures:
    """The features of a turn. A transcript's speaker label ("Maria: ...") is not part of what was said, and the
    period of "Dr." ends no sentence (or "Dr. Carvalho" would open one and not count as a name)."""
    text = _ABBREVIATION.sub(r"\1", _SPEAKER.sub("", text, count=1))
    sentences = [s.strip() for s in _SENTENCE.findall(text) if s.strip()] or [text]
    folded = text.translate(_FOLD)
    counted = {name: len(pattern.findall(folded)) for name, pattern in _COUNTED_FOLDED.items()}
    return TextFeatures(
        words=len(_WORD.findall(text)),
        names=_count_names(sentences),
        numbers=len(_NUMBER.findall(text)),
        time_refs=counted["time"],
        first_person=counted["first_person"],
        preference=counted["preference"],
        plan=counted["plan"],
        self_fact=counted["self_fact"],
        event=counted["event"],
        procedure=counted["procedure"],
        question_share=sum(s.endswith("?") for s in sentences) / len(sentences),
        reaction_share=sum(bool(_REACTION.match(s)) for s in sentences) / len(sentences),
        boilerplate=counted["boilerplate"],
    )


_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(\d])|\n+")


def sentences_of(text: str) -> tuple[str, list[str]]:
    """A turn's speaker label ("Maria: ", or "") and its sentences, as they were written (the period of "Dr."
    ends no sentence)."""
    label = _SPEAKER.match(text)
    body = text[label.end() :] if label else text
    shielded = _ABBREVIATION.sub(lambda m: m.group(0).replace(".", "\0"), body)
    found = [s.strip().replace("\0", ".") for s in _SENTENCE_BREAK.split(shielded) if s.strip()]
    return (label.group(0).strip() + " " if label else ""), found


def speaker_label(text: str) -> str:
    """The transcript speaker a text opens with ("Maria" for "Maria: ..." or "[6 Jul] Maria: ..."), or ""."""
    label = _SPEAKER.match(_DATED.sub("", text, count=1))
    return label.group(0).strip().rstrip(":") if label else ""


def is_reaction(sentence: str) -> bool:
    """A sentence that reacts to what the other said ("Wow, that's great!", "Thanks") and states nothing new."""
    return bool(_REACTION.match(sentence))


def _count_names(sentences: list[str]) -> int:
    """Capitalised words that are not the first of their sentence and not a greeting or pronoun."""
    names: set[str] = set()
    for sentence in sentences:
        words = _WORD.findall(sentence)
        vocative = 2 if words and words[0] in _GREETING else 1  # "Hey Sam!" names who is spoken to, not a fact
        names.update(w for w in words[vocative:] if w[0].isupper() and w not in _NOT_NAMES and not w.isupper())
    return len(names)


def memory_type_of(features: TextFeatures) -> MemoryType:
    """Preference over procedure over lasting fact; what is left is an episode (an event, a plan, a moment)."""
    if features.preference:
        return MemoryType.PREFERENCE
    if features.procedure and not features.event:
        return MemoryType.PROCEDURAL
    if features.self_fact and not (features.event or features.time_refs or features.plan):
        return MemoryType.SEMANTIC
    return MemoryType.EPISODIC


def asks_question(text: str | None) -> bool:
    """Whether a turn ends by asking something (a question mark in its last sentence or so): the turn after it
    usually carries the answer."""
    return text is not None and "?" in text[-80:]


_SELF = (_EVENT, _PREFERENCE, _PLAN, _SELF_FACT)


def self_statements(text: str) -> tuple[str, list[str]]:
    """A turn's speaker label and the sentences in which the speaker says what they did, like, plan or are ("I
    signed up for a pottery class"): the material of a digest. Questions and reactions state nothing of the kind."""
    label, sentences = sentences_of(text)
    return label, [s for s in sentences if is_self_statement(s)]


def is_self_statement(sentence: str) -> bool:
    """Whether `sentence` says what its speaker did, likes, plans or is (not a question, not a reaction)."""
    return (
        len(sentence) >= 12
        and not sentence.endswith("?")
        and not is_reaction(sentence)
        and any(p.search(sentence) for p in _SELF)
    )


@dataclass(frozen=True, slots=True)
class SentenceMarks:
    """What one sentence carries, for compression (cognition/compress.py) to weigh."""

    filler: bool  # a reaction or boilerplate: it states nothing, whatever it mentions
    number: bool
    time_ref: bool
    self_statement: bool  # the speaker on themselves: an event, a preference, a plan, a fact
    first_person: bool


def sentence_marks(sentence: str) -> SentenceMarks:
    return SentenceMarks(
        filler=is_reaction(sentence) or bool(_BOILERPLATE.search(sentence)),
        number=bool(_NUMBER.search(sentence)),
        time_ref=bool(_TIME.search(sentence)),
        self_statement=any(p.search(sentence) for p in _SELF),
        first_person=bool(_FIRST_PERSON.search(sentence)),
    )
