"""Write `agent_memory/cognition/data/common_words.txt`: the lower-case English words that are more often written
in lower case than capitalised, read from the cl100k_base BPE vocabulary that litellm's wheel ships.

A BPE vocabulary gives its merges in the order of their frequency in the text it was learnt from, so a word that
is one token with a leading space (" consider") and ranks before its capitalised form (" Consider"), or has no
capitalised token at all, is a word people write in lower case: capitalised, it is a sentence opener, not a name.
Names run the other way: " Paris" ranks 12,366 and " paris" 41,958; " Melanie" is a token and " melanie" is not.
The entity extractor reads the list (cognition/extraction.py); it is written once here, so what an install
extracts never depends on the litellm version beside it.

    python scripts/common_words.py            # rewrite the list
    python scripts/common_words.py --check    # exit 1 when the list differs from what the vocabulary gives
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import sys
from pathlib import Path

from agent_memory.cognition.tokens import CL100K_URL, _bundled_bpe_dir

OUT = Path(__file__).resolve().parents[1] / "agent_memory" / "cognition" / "data" / "common_words.txt"
HEADER = (
    "# Lower-case English words written more often in lower case than capitalised: each is one token of the\n"
    "# cl100k_base BPE vocabulary (tiktoken, MIT licence) with a leading space, ranked before its capitalised form\n"
    "# or without one. Written by scripts/common_words.py; do not edit by hand.\n"
)


def common_words(vocabulary: bytes) -> list[str]:
    ranks: dict[str, int] = {}
    for line in vocabulary.splitlines():
        token, rank = line.split()
        word = base64.b64decode(token)
        if word[:1] == b" " and word[1:].isalpha():  # ASCII letters only
            ranks[word[1:].decode("ascii")] = int(rank)
    return sorted(
        word
        for word, rank in ranks.items()
        if len(word) > 1 and word.islower() and rank < ranks.get(word.capitalize(), sys.maxsize)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the list in the package; write nothing")
    args = parser.parse_args()
    source = _bundled_bpe_dir() / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    text = HEADER + "".join(f"{word}\n" for word in common_words(source.read_bytes()))
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print("the list is current" if same else f"{OUT} differs from the vocabulary's list")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}: {text.count(chr(10)) - HEADER.count(chr(10))} words")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
