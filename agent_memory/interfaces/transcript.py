"""A Claude Code session transcript (JSONL) read for its last exchange, and the worklog line made of it (the Stop
hook, interfaces/cli_hooks.py).

Each line is one JSON object; `"type": "user"` and `"type": "assistant"` lines carry a `message` whose `content` is
a string or a list of blocks (`text`, `tool_use`, `tool_result`, `thinking`, ...). A user line holding tool results,
a meta line (`isMeta`), a subagent's line (`isSidechain`), a compaction summary and a slash command's echo are not
prompts. Only the end of a long file is read. Pure but for reading that file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TAIL_BYTES = 4 * 1024 * 1024
WORKLOG_CHARS = 600
PROMPT_SHARE = 220
"""At most this much of a worklog line is the prompt; the rest (and what the prompt leaves) is the answer."""
NOT_PROMPTS = ("<command-", "<local-command-", "<system-reminder>", "Caveat: ")


def tail_lines(path: Path, *, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The file's complete lines within its last `max_bytes` (a line cut by the start of that window is dropped)."""
    with path.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - max_bytes))
        data = file.read()
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if size > max_bytes and lines else lines


def last_exchange(lines: Iterable[str]) -> tuple[str, str] | None:
    """(the last prompt the user typed, the last text the agent wrote after it); the answer is "" when the agent
    wrote no text yet, and None comes back when there is no prompt at all. Lines that are not JSON are skipped."""
    answer: str | None = None
    for line in reversed(list(lines)):
        entry = _entry(line)
        if entry is None:
            continue
        kind, content = entry
        if kind == "assistant" and answer is None:
            answer = _text(content, allow_tools=True) or None
        elif kind == "user":
            prompt = _text(content, allow_tools=False)
            if prompt and not prompt.startswith(NOT_PROMPTS):
                return prompt, answer or ""
    return None


def _entry(line: str) -> tuple[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("type") not in ("user", "assistant"):
        return None
    if entry.get("isMeta") or entry.get("isSidechain") or entry.get("isCompactSummary"):
        return None
    message = entry.get("message")
    if not isinstance(message, dict):
        return None
    return str(entry["type"]), message.get("content")


def _text(content: Any, *, allow_tools: bool) -> str:
    """The text blocks of a message, joined; "" for a user message that carries tool results (not a prompt)."""
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    blocks = [b for b in content if isinstance(b, dict)]
    if not allow_tools and any(b.get("type") == "tool_result" for b in blocks):
        return ""
    texts = [b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]
    return "\n".join(t.strip() for t in texts if t.strip())


def worklog_text(prompt: str, answer: str, *, max_chars: int = WORKLOG_CHARS) -> str:
    """ "User asked: ... / Agent did: ..." in at most `max_chars` characters, each part on one line."""
    ask = _squeeze(prompt, PROMPT_SHARE)
    head = f"User asked: {ask}\nAgent did: "
    return head + (_squeeze(answer, max_chars - len(head)) or "(no text)")


def _squeeze(text: str, limit: int) -> str:
    """Whitespace runs made one space; cut at a word before `limit` with an ellipsis when it is longer."""
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", limit // 2, limit)
    return flat[: cut if cut > 0 else limit - 1].rstrip() + "…"
