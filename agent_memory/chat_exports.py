"""Readers for the chat histories people already have: ChatGPT's and Claude's data exports (`conversations.json`).

Each conversation becomes a session (`chatgpt/<conversation id>`, `claude/<conversation uuid>`), each message of it
a turn dated by the message's own time, so a year of history is remembered as it was lived. The file is read one
conversation at a time (json_stream.py): memory holds one conversation, whatever the export's size. The export's
zip, as downloaded, is read as well as the `conversations.json` in it.

Both exports keep a conversation as a tree: editing a message or asking for another answer starts a branch, and
the abandoned branches stay in the file. What is read is the conversation as it was left: the thread from the
current message (ChatGPT's `current_node`, Claude's `current_leaf_message_uuid`; else the newest message with no
reply) back to the first. A turn's number is its depth in that thread, so the same conversation exported again
later, with more messages, gives its earlier turns the same keys, and `agent-memory ingest` skips them.

What is a turn: the user's and the assistant's messages with text. Left out: system and tool messages, calls to
tools, hidden context (custom instructions, memory updates), the model's reasoning, and messages with no text (an
image alone). Text pasted into Claude as an attachment is part of the user's turn, after the message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_memory.errors import InvalidInput
from agent_memory.json_stream import array_items
from agent_memory.models import TurnInput

EXPORT_FILE = "conversations.json"
"""The file of an export's zip that holds the conversations (the zip can be given as it was downloaded)."""
CHATGPT_TEXT = frozenset({"text", "multimodal_text"})
"""ChatGPT content types that are what was said; the rest are tools' output, reasoning or hidden context."""
CLAUDE_ROLES = {"human": "user", "assistant": "assistant"}


def chatgpt_turns(path: Path) -> Iterator[TurnInput]:
    """The turns of a ChatGPT export's `conversations.json`, conversation by conversation."""
    for position, conversation in array_items(path, "conversations", member=EXPORT_FILE):
        yield from _checked(path, position, _chatgpt_conversation, conversation)


def claude_turns(path: Path) -> Iterator[TurnInput]:
    """The turns of a Claude export's `conversations.json`, conversation by conversation."""
    for position, conversation in array_items(path, "conversations", member=EXPORT_FILE):
        yield from _checked(path, position, _claude_conversation, conversation)


def _checked(
    path: Path, position: int, read: Callable[[Mapping[str, Any]], Iterator[TurnInput]], conversation: Any
) -> list[TurnInput]:
    """One conversation's turns, or InvalidInput naming the conversation and what is wrong with its shape."""
    try:
        if not isinstance(conversation, Mapping):
            raise TypeError(f"expected an object, got {type(conversation).__name__}")
        return list(read(conversation))
    except KeyError as exc:
        raise InvalidInput(f"{path.name}, conversation {position}: missing key {exc.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidInput(f"{path.name}, conversation {position}: {exc}") from None


def _chatgpt_conversation(conversation: Mapping[str, Any]) -> Iterator[TurnInput]:
    mapping = conversation["mapping"]
    if not isinstance(mapping, Mapping):
        raise TypeError(f"'mapping' must be an object, got {type(mapping).__name__}")
    session = _session("chatgpt", conversation.get("conversation_id") or conversation["id"])
    started = _from_epoch(conversation.get("create_time"), "create_time")
    nodes = {key: node for key, node in mapping.items() if isinstance(node, Mapping)}
    tip = conversation.get("current_node")
    if tip not in nodes:
        tip = _newest_leaf(nodes, lambda n: n.get("parent"), lambda n: _chatgpt_time(n.get("message")))
    for depth, node in enumerate(_thread(nodes, tip, lambda n: n.get("parent"))):
        said = _chatgpt_said(node.get("message"))
        if said is not None:
            role, text, at = said
            yield TurnInput(session, depth, text, role, at=at or started)


def _chatgpt_said(message: Any) -> tuple[str, str, datetime | None] | None:
    """(role, text, time) of a message that is part of the conversation as its people saw it; None otherwise."""
    if not isinstance(message, Mapping):
        return None
    role = (message.get("author") or {}).get("role")
    content = message.get("content") or {}
    if role not in ("user", "assistant") or content.get("content_type") not in CHATGPT_TEXT:
        return None
    if (message.get("metadata") or {}).get("is_visually_hidden_from_conversation"):
        return None
    if message.get("recipient") not in (None, "all"):  # the assistant calling a tool (python, browser, memory)
        return None
    parts = content.get("parts") or []
    if not isinstance(parts, list):
        raise TypeError(f"message {message.get('id')!r}: 'parts' must be a list, got {type(parts).__name__}")
    texts = [p if isinstance(p, str) else p.get("text") for p in parts if isinstance(p, (str, Mapping))]
    text = "\n".join(t for t in texts if isinstance(t, str) and t.strip())  # an image part has no text
    if not text.strip():
        return None
    return role, text, _from_epoch(message.get("create_time"), f"message {message.get('id')!r} create_time")


def _chatgpt_time(message: Any) -> float:
    when = message.get("create_time") if isinstance(message, Mapping) else None
    return float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else float("-inf")


def _claude_conversation(conversation: Mapping[str, Any]) -> Iterator[TurnInput]:
    session = _session("claude", conversation["uuid"])
    started = _from_iso(conversation.get("created_at"), "created_at")
    messages = conversation["chat_messages"]
    if not isinstance(messages, list):
        raise TypeError(f"'chat_messages' must be a list, got {type(messages).__name__}")
    listed = [m for m in messages if isinstance(m, Mapping)]
    nodes = {m["uuid"]: m for m in listed if m.get("uuid") is not None}
    if len(nodes) == len(listed) and all("parent_message_uuid" in m for m in listed):  # a tree: read its thread
        tip = conversation.get("current_leaf_message_uuid")
        if tip not in nodes:
            tip = _newest_leaf(nodes, lambda m: m.get("parent_message_uuid"), lambda m: _iso_key(m.get("created_at")))
        thread = _thread(nodes, tip, lambda m: m.get("parent_message_uuid"))
    else:  # an older export: the messages in order
        thread = listed
    for depth, message in enumerate(thread):
        role = CLAUDE_ROLES.get(message.get("sender"))
        text = _claude_text(message)
        if role is not None and text.strip():
            at = _from_iso(message.get("created_at"), f"message {message.get('uuid')!r} created_at")
            yield TurnInput(session, depth, text, role, at=at or started)


def _claude_text(message: Mapping[str, Any]) -> str:
    """The message's text blocks (not its thinking or tool calls), or its `text` when it has no blocks; then the
    text of what was pasted as an attachment."""
    blocks = message.get("content")
    if isinstance(blocks, list) and blocks:
        said = [b["text"] for b in blocks if isinstance(b, Mapping) and b.get("type") == "text"]
        text = "\n\n".join(t for t in said if isinstance(t, str) and t.strip())
    else:
        given = message.get("text")
        text = given if isinstance(given, str) else ""
    for attachment in message.get("attachments") or []:
        pasted = attachment.get("extracted_content") if isinstance(attachment, Mapping) else None
        if isinstance(pasted, str) and pasted.strip():
            name = attachment.get("file_name") or "attachment"
            text = f"{text}\n\n[attached: {name}]\n{pasted}" if text.strip() else f"[attached: {name}]\n{pasted}"
    return text


def _thread(nodes: Mapping[Any, Mapping[str, Any]], tip: Any, parent: Callable[[Any], Any]) -> list[Any]:
    """The nodes from the root down to `tip`, following each node's parent (a loop in the parents is cut)."""
    chain: list[Any] = []
    seen: set[Any] = set()
    while tip in nodes and tip not in seen:
        seen.add(tip)
        chain.append(nodes[tip])
        tip = parent(nodes[tip])
    return chain[::-1]


def _newest_leaf(
    nodes: Mapping[Any, Mapping[str, Any]], parent: Callable[[Any], Any], when: Callable[[Any], Any]
) -> Any:
    """The node no other names as its parent that is newest by `when` (the last listed among equals); None when
    there are no nodes."""
    parents = {parent(node) for node in nodes.values()}
    leaves = [key for key in nodes if key not in parents]
    newest = None
    for key in leaves:
        if newest is None or when(nodes[key]) >= when(nodes[newest]):
            newest = key
    return newest


def _session(source: str, raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"the conversation id {raw!r} is not a string")
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._:@-") else "-" for c in raw.strip())
    return f"{source}/{cleaned}"[:128]


def _from_epoch(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{field} {value!r} is not a number of seconds")
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"{field} {value!r} is out of range") from None


def _from_iso(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field} {value!r} is not an ISO-8601 time")
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{field} {value!r} is not an ISO-8601 time") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _iso_key(value: Any) -> str:
    return value if isinstance(value, str) else ""
