"""Key phrases of one text by YAKE's statistics, without YAKE's machinery.

The method is YAKE (Campos et al., "YAKE! Keyword extraction from single documents using multiple local
features", Information Sciences 509, 2020): every word gets a weight from five local features, and a phrase of one or
two words scores `prod(H) / (tf * (1 + sum(H)))`, lower being better. This is our own implementation over plain
dicts: the `yake` package builds a networkx graph and calls numpy for every word, about 3 ms a LoCoMo turn and
20 ms a long LongMemEval turn; this takes a tenth of that, which keeps the projector's work per memory small.

The features of a word w, from the text alone:
- casing: how often it is capitalised mid-sentence or an acronym, `max(n_upper, n_acronym) / (1 + ln tf)`;
- position: `ln(ln(3 + median sentence index))`, early words weigh more;
- frequency: `tf / (mean tf + std tf)` over the text's content words;
- relatedness: `1 + (distinct left / left + distinct right / right) * tf / max tf` over adjacent words: a word next
  to many different words is a function word in disguise;
- spread: the share of sentences it occurs in.
`H = rel * pos / (case + freq / rel + spread / rel)`.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from agent_memory.cognition.retrieval import STOPWORDS

_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_CHUNKS = re.compile(r"[,;:()\[\]{}\"“”…]|\s[-–—]+\s|[-–—]+\s|[.!?]+(?=\s|$)")
_TOKEN = re.compile(r"[^\W_]+(?:['’.-][^\W_]+)*", re.UNICODE)
# Function and filler words of conversation, beyond the query stopwords: never the edge of a key phrase.
_FILLER = frozenset(
    [
        "all",
        "also",
        "am",
        "any",
        "anyone",
        "anything",
        "anyway",
        "because",
        "being",
        "both",
        "come",
        "could",
        "did",
        "doing",
        "done",
        "each",
        "even",
        "ever",
        "every",
        "everyone",
        "everything",
        "few",
        "get",
        "gets",
        "getting",
        "go",
        "goes",
        "going",
        "gone",
        "got",
        "gotten",
        "just",
        "least",
        "less",
        "let",
        "let's",
        "like",
        "lot",
        "lots",
        "made",
        "make",
        "makes",
        "many",
        "may",
        "maybe",
        "might",
        "more",
        "most",
        "much",
        "must",
        "no",
        "nor",
        "not",
        "nothing",
        "now",
        "off",
        "oh",
        "ok",
        "okay",
        "once",
        "one",
        "only",
        "other",
        "others",
        "ought",
        "out",
        "over",
        "own",
        "really",
        "same",
        "say",
        "says",
        "said",
        "see",
        "seen",
        "shall",
        "should",
        "since",
        "some",
        "someone",
        "something",
        "still",
        "such",
        "sure",
        "take",
        "thanks",
        "thank",
        "that's",
        "there's",
        "they're",
        "thing",
        "things",
        "those",
        "though",
        "through",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "us",
        "very",
        "want",
        "wants",
        "way",
        "well",
        "what's",
        "whatever",
        "whenever",
        "while",
        "whose",
        "yeah",
        "yes",
        "yet",
        "you're",
        "you've",
        "i'm",
        "i've",
        "i'll",
        "i'd",
        "it's",
        "we're",
        "we've",
        "can't",
        "don't",
        "didn't",
        "doesn't",
        "isn't",
        "wasn't",
        "won't",
        "wouldn't",
        "couldn't",
        "shouldn't",
        "haven't",
        "hasn't",
        "hadn't",
        "aren't",
        "weren't",
        "here",
        "hi",
        "hey",
        "hello",
        "wow",
        "yep",
        "nope",
        "hmm",
        "btw",
        "gonna",
        "wanna",
        "kinda",
        "sorta",
        "pretty",
        "quite",
        "rather",
        "again",
        "ago",
        "always",
        "never",
        "sometimes",
        "often",
        "usually",
        "today",
        "tomorrow",
        "yesterday",
        "tonight",
        "know",
        "think",
        "thought",
        "feel",
        "felt",
        "looks",
        "look",
        "seems",
        "seem",
        "sounds",
        "sound",
        "guess",
        "mean",
        "means",
        "tell",
        "told",
        "ask",
        "asked",
        "keep",
        "kept",
        "try",
        "tried",
        "put",
        "puts",
        "lol",
        "haha",
        "they've",
        "here's",
        "around",
        "went",
        "came",
        "gave",
        "took",
        "saw",
        "met",
        "found",
        "left",
        "became",
        "began",
    ]
)
STOP = STOPWORDS | _FILLER


@dataclass
class _Word:
    tf: int = 0
    upper: int = 0
    acronym: int = 0
    sentences: list[int] = field(default_factory=list)
    left: Counter[str] = field(default_factory=Counter)
    right: Counter[str] = field(default_factory=Counter)


def key_phrases(text: str, limit: int, *, similarity: float = 0.7) -> tuple[str, ...]:
    """Up to `limit` key phrases of one or two words, lower-cased, best first; a phrase too similar (character
    ratio above `similarity`) to a better one is left out."""
    if limit <= 0:
        return ()
    chunks = list(_chunks(text))
    words = _words(chunks)
    weights = _weights(words, sentences=max((s for s, _ in chunks), default=0) + 1)
    if not weights:
        return ()
    phrases: Counter[tuple[str, ...]] = Counter()
    for _, tokens in chunks:
        lower = [t.lower().replace("’", "'") for t in tokens]
        for i, word in enumerate(lower):
            if word in weights:
                phrases[(word,)] += 1
                if i + 1 < len(lower) and lower[i + 1] in weights:
                    phrases[(word, lower[i + 1])] += 1
    ranked = sorted(phrases, key=lambda p: _score(p, phrases[p], weights))  # stable: ties keep the earlier first
    return _distinct(ranked, limit, similarity)


def _chunks(text: str) -> Iterator[tuple[int, list[str]]]:
    """(sentence index, tokens) of each run of words between punctuation marks."""
    for index, sentence in enumerate(s for s in _SENTENCES.split(text) if s.strip()):
        for chunk in _CHUNKS.split(sentence):
            tokens = _TOKEN.findall(chunk)
            if tokens:
                yield index, tokens


def _words(chunks: list[tuple[int, list[str]]]) -> dict[str, _Word]:
    """The counts behind the features of every candidate word (stopwords, numbers and single letters are none)."""
    words: dict[str, _Word] = {}
    first_in_sentence = -1
    for sentence, tokens in chunks:
        lower = [t.lower().replace("’", "'") for t in tokens]
        for i, word in enumerate(lower):
            if word in STOP or len(word) < 2 or word.isdigit():
                continue
            w = words.get(word)
            if w is None:
                w = words[word] = _Word()
            w.tf += 1
            w.sentences.append(sentence)
            token = tokens[i]
            if len(token) > 1 and token.isupper() and token.isalpha():
                w.acronym += 1
            elif token[0].isupper() and (i > 0 or sentence == first_in_sentence):
                w.upper += 1
            if i > 0:
                w.left[lower[i - 1]] += 1
            if i + 1 < len(lower):
                w.right[lower[i + 1]] += 1
        first_in_sentence = sentence
    return words


def _weights(words: dict[str, _Word], *, sentences: int) -> dict[str, float]:
    """H of every candidate word."""
    content = [w.tf for w in words.values()]
    if not content:
        return {}
    mean, spread, most = statistics.fmean(content), statistics.pstdev(content), max(content)
    weights: dict[str, float] = {}
    for key, w in words.items():
        if not any(c.isalpha() for c in key):
            continue
        case = max(w.upper, w.acronym) / (1 + math.log(w.tf))
        position = math.log(math.log(3 + statistics.median(w.sentences)))
        frequency = w.tf / (mean + spread)
        related = 1 + (_diversity(w.left) + _diversity(w.right)) * w.tf / most
        different = len(set(w.sentences)) / sentences
        weights[key] = related * position / (case + frequency / related + different / related)
    return weights


def _diversity(neighbours: Counter[str]) -> float:
    total = sum(neighbours.values())
    return len(neighbours) / total if total else 0.0


def _score(phrase: tuple[str, ...], tf: int, weights: dict[str, float]) -> float:
    product, total = 1.0, 0.0
    for word in phrase:
        product *= weights[word]
        total += weights[word]
    return product / (tf * (1 + total))


def _distinct(ranked: list[tuple[str, ...]], limit: int, similarity: float) -> tuple[str, ...]:
    chosen: list[str] = []
    for phrase in ranked:
        text = " ".join(phrase)
        if not any(_similar(text, other, similarity) for other in chosen):
            chosen.append(text)
            if len(chosen) == limit:
                break
    return tuple(chosen)


def _similar(a: str, b: str, threshold: float) -> bool:
    """difflib's character ratio above `threshold`, its cheap upper bounds tried first."""
    if 2 * min(len(a), len(b)) / (len(a) + len(b)) <= threshold:
        return False
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    return matcher.quick_ratio() > threshold and matcher.ratio() > threshold
