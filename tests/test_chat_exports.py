"""ChatGPT and Claude exports as `agent-memory ingest` reads them, and the streaming JSON reader under them.

The export files are written here in each service's format (a conversation as a tree of messages, with the branches
an edit leaves behind, tool calls, hidden context and reasoning), never taken from anyone's history.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import tempfile
import tracemalloc
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_memory.bench.datasets import detect_format, read_jsonl
from agent_memory.chat_exports import chatgpt_turns, claude_turns
from agent_memory.errors import InvalidInput
from agent_memory.interfaces.cli import main
from agent_memory.json_stream import array_items

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


# --- the streaming reader -------------------------------------------------------------------------------------------

DOCUMENTS: list[Any] = [
    [],
    [{"a": 1}],
    [1, 22, 333, -4.5e3, True, None, "x"],
    [{"text": "naïve café ☕ 日本語 \U0001f600", "n": [1, [2, [3]]]}, {"empty": {}}, [], ""],
    [{"k": "v" * 50, "quote": 'say "hi"\\n', "nums": list(range(30))} for _ in range(12)],
]


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
def test_the_items_are_what_json_load_gives_at_any_read_size(tmp_path: Path, indent: int | None, chunk: int) -> None:
    for number, document in enumerate(DOCUMENTS):
        path = tmp_path / f"doc{number}.json"
        path.write_text(json.dumps(document, indent=indent, ensure_ascii=False), encoding="utf-8")
        items = [item for _, item in array_items(path, "items", chunk=chunk)]
        assert items == json.loads(path.read_text(encoding="utf-8")), (document, chunk)


def test_gzip_and_a_byte_order_mark_are_read(tmp_path: Path) -> None:
    path = tmp_path / "doc.json.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b"\xef\xbb\xbf" + json.dumps([{"a": 1}, {"b": 2}]).encode())
    assert list(array_items(path, "items", chunk=2)) == [(1, {"a": 1}), (2, {"b": 2})]


@pytest.mark.parametrize("chunk", [3, 1 << 20])
@pytest.mark.parametrize(
    "text",
    [
        '[{"a": 1},\n {"b": 2,}\n]',  # a trailing comma inside an item
        '[{"a": 1},\n\n  {"b": tru}]',
        '[\n  {"a": 1}\n  {"b": 2}\n]',  # no comma between items
        '[{"a": "' + "x" * 40 + '"}, {"b" 2}]',  # on one long line, past the first read
    ],
)
def test_malformed_json_is_named_by_the_line_and_column_json_loads_gives(tmp_path: Path, text: str, chunk: int) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(InvalidInput, match="malformed JSON") as error:
        list(array_items(path, "items", chunk=chunk))
    assert f"bad.json line {expected.value.lineno} column {expected.value.colno}:" in str(error.value)


def test_a_file_that_is_not_a_list_is_refused_by_what_it_is(tmp_path: Path) -> None:
    cases = {
        "obj.json": ('{"a": [1]}', "got an object"),
        "num.json": ("42", "got a number"),
        "empty.json": ("", "got nothing"),
    }
    for name, (text, says) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(InvalidInput, match=f"{name}: expected a JSON list of conversations, {says}"):
            list(array_items(tmp_path / name, "conversations"))
    (tmp_path / "tail.json").write_text("[1, 2] [3]")
    with pytest.raises(InvalidInput, match="tail.json line 1 column 8: malformed JSON \\(extra data"):
        list(array_items(tmp_path / "tail.json", "items"))
    (tmp_path / "open.json").write_text('[{"a": 1}, {"b":')
    with pytest.raises(InvalidInput, match="open.json line 1 column 17: malformed JSON"):
        list(array_items(tmp_path / "open.json", "items"))


def test_bytes_that_are_not_utf8_are_named_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'[{"a": 1},\n{"b": 2},\n{"c": "caf\xe9"}]')
    for chunk in (1, 5, 1 << 20):
        with pytest.raises(InvalidInput, match=r"latin1.json is not valid UTF-8 \(byte 0xe9 on line 3\)"):
            list(array_items(path, "items", chunk=chunk))


_SCALARS = (
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=False) | st.text(max_size=12)
)
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(_VALUES, max_size=6),
    chunk=st.integers(1, 40),
    indent=st.sampled_from([None, 0, 2]),
    ascii_only=st.booleans(),
    pad=st.sampled_from(["", "\n", " \r\n\t"]),
    cut=st.floats(0, 1, exclude_max=True),
)
def test_any_list_reads_as_json_loads_reads_it_and_a_cut_one_is_refused(
    items: list[Any], chunk: int, indent: int | None, ascii_only: bool, pad: str, cut: float
) -> None:
    """Random JSON (escapes, non-ASCII, exponents, nesting) at random read sizes, so that strings, escapes, numbers
    and multi-byte characters fall across reads: the same items as json.loads; the same file cut anywhere (a
    download that stopped) is refused, never read as fewer items."""
    text = pad + json.dumps(items, indent=indent, ensure_ascii=ascii_only) + pad
    with tempfile.TemporaryDirectory() as folder:
        whole, partial = Path(folder) / "whole.json", Path(folder) / "cut.json"
        whole.write_bytes(text.encode())
        assert [item for _, item in array_items(whole, "items", chunk=chunk)] == json.loads(text)
        body = text.strip()
        partial.write_bytes(body[: int(cut * len(body))].encode())
        with pytest.raises(InvalidInput):
            list(array_items(partial, "items", chunk=chunk))


def test_memory_holds_an_item_and_a_read_ahead_not_the_file(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    item = {"title": "t", "mapping": {str(n): {"text": "word " * 40} for n in range(20)}}
    with path.open("w") as fh:  # about 8 MB of items of 4 KB
        fh.write("[" + ",".join(json.dumps(item) for _ in range(2000)) + "]")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        count = sum(1 for _ in array_items(path, "items", chunk=64 * 1024))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 2000
    assert peak < size / 16, f"peak {peak} bytes while reading a {size}-byte file"  # json.load holds several times it


# --- ChatGPT --------------------------------------------------------------------------------------------------------


def gpt_node(
    node_id: str,
    parent: str | None,
    role: str | None,
    text: Any = None,
    *,
    seconds: float | None = None,
    content_type: str = "text",
    recipient: str = "all",
    hidden: bool = False,
) -> dict[str, Any]:
    message = None
    if role is not None:
        parts = text if isinstance(text, list) else [text]
        message = {
            "id": node_id,
            "author": {"role": role, "name": None, "metadata": {}},
            "create_time": None if seconds is None else T0 + seconds,
            "content": {"content_type": content_type, "parts": parts},
            "status": "finished_successfully",
            "metadata": {"is_visually_hidden_from_conversation": True} if hidden else {},
            "recipient": recipient,
        }
    return {"id": node_id, "message": message, "parent": parent, "children": []}


def gpt_conversation(conversation_id: str, nodes: list[dict[str, Any]], current: str | None) -> dict[str, Any]:
    mapping = {node["id"]: node for node in nodes}
    for node in nodes:
        if node["parent"] is not None:
            mapping[node["parent"]]["children"].append(node["id"])
    conversation: dict[str, Any] = {
        "title": "Moving to Porto",
        "create_time": T0,
        "update_time": T0 + 900,
        "mapping": mapping,
        "conversation_id": conversation_id,
        "id": conversation_id,
    }
    if current is not None:
        conversation["current_node"] = current
    return conversation


def porto_chat(extra: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    nodes = [
        gpt_node("root", None, None),
        gpt_node("sys", "root", "system", "You are ChatGPT.", hidden=True),
        gpt_node("ctx", "sys", "user", "I'm a designer.", content_type="user_editable_context"),
        gpt_node("u1", "ctx", "user", "I am moving to Lisbon in May.", seconds=10),  # edited away
        gpt_node("a1", "u1", "assistant", "Lisbon is lovely.", seconds=20),
        gpt_node("u1b", "ctx", "user", "I am moving to Porto in May, with my cat Miso.", seconds=30),
        gpt_node("think", "u1b", "assistant", "Reasoning about moves", seconds=31, content_type="thoughts"),
        gpt_node("call", "think", "assistant", "search('Porto flats')", seconds=32, recipient="browser"),
        gpt_node("tool", "call", "tool", "3 results", seconds=33, content_type="tether_browsing_display"),
        gpt_node("a2", "tool", "assistant", "Porto's Bonfim district suits cats.", seconds=40),
        gpt_node(
            "u2",
            "a2",
            "user",
            [{"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"}, "Here is the flat."],
            seconds=50,
            content_type="multimodal_text",
        ),
        gpt_node(
            "u3", "u2", "user", [{"content_type": "image_asset_pointer"}], seconds=60, content_type="multimodal_text"
        ),
        *extra,
    ]
    return gpt_conversation("c-porto", nodes, nodes[-1]["id"])


def test_chatgpt_reads_the_thread_as_it_was_left(tmp_path: Path) -> None:
    other = gpt_conversation(
        "c-tea",
        [gpt_node("r", None, None), gpt_node("q", "r", "user", "Which green tea is least bitter?", seconds=500)],
        None,  # no current_node: the newest message with no reply
    )
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([porto_chat(), other]))
    turns = list(chatgpt_turns(path))
    assert [(t.session_id, t.turn_number, t.role, t.content) for t in turns] == [
        ("chatgpt/c-porto", 3, "user", "I am moving to Porto in May, with my cat Miso."),
        ("chatgpt/c-porto", 7, "assistant", "Porto's Bonfim district suits cats."),
        ("chatgpt/c-porto", 8, "user", "Here is the flat."),
        ("chatgpt/c-tea", 1, "user", "Which green tea is least bitter?"),
    ]
    assert [t.at for t in turns] == [at(30), at(40), at(50), at(500)]
    assert {t.namespace for t in turns} == {"default"}


def test_chatgpt_dates_a_message_without_a_time_by_its_conversation(tmp_path: Path) -> None:
    conversation = gpt_conversation(
        "c1", [gpt_node("r", None, None), gpt_node("q", "r", "user", "Hi there, note this")], "q"
    )
    path = tmp_path / "c.json"
    path.write_text(json.dumps([conversation]))
    assert [t.at for t in chatgpt_turns(path)] == [at(0)]


def test_chatgpt_a_malformed_conversation_is_named(tmp_path: Path) -> None:
    good = gpt_conversation("c1", [gpt_node("r", None, None), gpt_node("q", "r", "user", "fine", seconds=1)], "q")
    cases = [
        ({"title": "x", "id": "c2", "mapping": []}, "conversation 2: 'mapping' must be an object, got list"),
        ({"title": "x", "id": "c2"}, "conversation 2: missing key 'mapping'"),
        ("just text", "conversation 2: expected an object, got str"),
        (
            {**good, "id": "c2", "conversation_id": "c2", "create_time": "yesterday"},
            "conversation 2: create_time 'yesterday'",
        ),
    ]
    for bad, says in cases:
        path = tmp_path / "c.json"
        path.write_text(json.dumps([good, bad]))
        with pytest.raises(InvalidInput, match="c.json, " + says.replace("(", r"\(")):
            list(chatgpt_turns(path))


def test_an_export_is_read_from_its_zip_as_downloaded(tmp_path: Path) -> None:
    plain = tmp_path / "conversations.json"
    plain.write_text(json.dumps([porto_chat()]))
    export = tmp_path / "export.zip"
    with zipfile.ZipFile(export, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("chat.html", "<html></html>")
        archive.writestr("user.json", "{}")
        archive.write(plain, "export-2026-12-06/conversations.json")
    assert list(chatgpt_turns(export)) == list(chatgpt_turns(plain))

    empty = tmp_path / "photos.zip"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("a.png", b"png")
    with pytest.raises(
        InvalidInput,
        match=r"photos.zip: expected a file named conversations.json in the zip, found none \(it holds: a.png\)",
    ):
        list(chatgpt_turns(empty))
    (tmp_path / "fake.zip").write_text("not a zip")
    with pytest.raises(InvalidInput, match="fake.zip: not a zip file"):
        list(claude_turns(tmp_path / "fake.zip"))

    corrupt = tmp_path / "corrupt.zip"  # a stored member whose bytes no longer match its checksum
    with zipfile.ZipFile(corrupt, "w", zipfile.ZIP_STORED) as archive:
        archive.write(plain, "conversations.json")
    data = corrupt.read_bytes()
    at_text = data.index(b"Porto")
    corrupt.write_bytes(data[:at_text] + b"Paris" + data[at_text + 5 :])
    with pytest.raises(InvalidInput, match="Cannot read .*corrupt.zip: Bad CRC-32"):
        list(chatgpt_turns(corrupt))


def test_jsonl_in_a_zip_and_an_export_given_as_jsonl_says_which_format_to_use(tmp_path: Path) -> None:
    turns = tmp_path / "turns.zip"
    with zipfile.ZipFile(turns, "w") as archive:
        archive.writestr("README.txt", "my turns")
        archive.writestr("t/turns.jsonl", json.dumps({"session_id": "s1", "turn_number": 0, "content": "hello"}) + "\n")
    assert [t.content for t in read_jsonl(turns)] == ["hello"]
    for indent in (None, 2):
        export = tmp_path / "conversations.json"
        export.write_text(json.dumps([porto_chat()], indent=indent))
        with pytest.raises(
            InvalidInput, match="conversations.json line 1: .*read with --format chatgpt or --format claude"
        ):
            list(read_jsonl(export))


def test_the_format_is_told_from_the_file(tmp_path: Path) -> None:
    claude = {"uuid": "c", "name": "", "created_at": at(0).isoformat(), "chat_messages": []}
    locomo = {"sample_id": "conv-1", "conversation": {}, "qa": []}
    files = {
        "turns.jsonl": ('\ufeff  {"session_id": "s1", "turn_number": 0, "content": "hi"}\n', "jsonl"),
        "chatgpt.json": ("\n" + json.dumps([porto_chat()], indent=2), "chatgpt"),
        "claude.json": (json.dumps([claude]), "claude"),
        "locomo.json": (json.dumps([locomo]), "locomo"),
        "photo.png": ("\x89PNG", "jsonl"),  # not a list: JSONL's reader names what is wrong, by line
    }
    for name, (content, expected) in files.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
        assert detect_format(tmp_path / name) == expected, name
    with gzip.open(tmp_path / "lme.json.gz", "wt") as fh:
        json.dump([{"question_id": "q1", "haystack_sessions": []}], fh)
    assert detect_format(tmp_path / "lme.json.gz") == "longmemeval"

    (tmp_path / "other.json").write_text(json.dumps([{"name": "x", "rows": []}]))
    with pytest.raises(
        InvalidInput, match=r"other.json is a JSON list whose first item \(an item with keys \['name', 'rows'\]\)"
    ):
        detect_format(tmp_path / "other.json")
    (tmp_path / "empty.json").write_text("[ ]")
    with pytest.raises(InvalidInput, match="empty.json is an empty JSON list: nothing to ingest"):
        detect_format(tmp_path / "empty.json")


# --- Claude ---------------------------------------------------------------------------------------------------------

ROOT_PARENT = "00000000-0000-4000-8000-000000000000"


def claude_message(
    uuid: str, parent: str | None, sender: str, content: list[dict[str, Any]], seconds: float, **more: Any
) -> dict[str, Any]:
    message = {
        "uuid": uuid,
        "text": "",
        "content": content,
        "sender": sender,
        "created_at": at(seconds).isoformat().replace("+00:00", "Z"),
        "updated_at": at(seconds).isoformat().replace("+00:00", "Z"),
        "attachments": [],
        "files": [],
        **more,
    }
    if parent is not None:
        message["parent_message_uuid"] = parent
    return message


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def test_claude_reads_the_newest_branch_and_leaves_out_thinking_and_tools(tmp_path: Path) -> None:
    messages = [
        claude_message("m1", ROOT_PARENT, "human", [text("My sister Ana's birthday is on 9 March.")], 10),
        claude_message(
            "m2",
            "m1",
            "assistant",
            [
                {"type": "thinking", "thinking": "They want a gift idea."},
                text("Noted."),
                {"type": "tool_use", "name": "web_search", "input": {"q": "gifts"}},
                {"type": "tool_result", "content": [text("results")]},
                text("A pottery class would suit her."),
            ],
            20,
        ),
        claude_message("m3", "m2", "human", [text("She hates pottery.")], 30),  # abandoned: edited into m3b
        claude_message(
            "m3b",
            "m2",
            "human",
            [text("Here is her wishlist.")],
            40,
            attachments=[{"file_name": "wishlist.txt", "file_type": "txt", "extracted_content": "1. a kite\n2. tea"}],
        ),
    ]
    conversation = {"uuid": "conv-1", "name": "Ana", "created_at": at(0).isoformat(), "chat_messages": messages}
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([conversation]))
    turns = list(claude_turns(path))
    assert [(t.session_id, t.turn_number, t.role, t.content) for t in turns] == [
        ("claude/conv-1", 0, "user", "My sister Ana's birthday is on 9 March."),
        ("claude/conv-1", 1, "assistant", "Noted.\n\nA pottery class would suit her."),
        ("claude/conv-1", 2, "user", "Here is her wishlist.\n\n[attached: wishlist.txt]\n1. a kite\n2. tea"),
    ]
    assert [t.at for t in turns] == [at(10), at(20), at(40)]

    conversation["current_leaf_message_uuid"] = "m3"  # the export names the branch it was left on
    path.write_text(json.dumps([conversation]))
    assert [t.content for t in claude_turns(path)][-1] == "She hates pottery."


def test_claude_an_older_export_without_parents_is_read_in_order(tmp_path: Path) -> None:
    messages = [
        {"uuid": "a", "text": "I run on Tuesdays.", "sender": "human", "created_at": at(5).isoformat()},
        {"uuid": "b", "text": "Good habit.", "sender": "assistant", "created_at": at(6).isoformat()},
        {"uuid": "c", "text": "  ", "sender": "human", "created_at": at(7).isoformat()},
    ]
    path = tmp_path / "old.json"
    path.write_text(
        json.dumps([{"uuid": "c-old", "name": "", "created_at": at(0).isoformat(), "chat_messages": messages}])
    )
    assert [(t.turn_number, t.role, t.content) for t in claude_turns(path)] == [
        (0, "user", "I run on Tuesdays."),
        (1, "assistant", "Good habit."),
    ]


def test_claude_a_malformed_conversation_is_named(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps([{"uuid": "x", "chat_messages": "none"}]))
    with pytest.raises(InvalidInput, match="c.json, conversation 1: 'chat_messages' must be a list, got str"):
        list(claude_turns(path))
    path.write_text(
        json.dumps(
            [{"uuid": "x", "chat_messages": [{"uuid": "m", "sender": "human", "text": "hi", "created_at": "soon"}]}]
        )
    )
    with pytest.raises(InvalidInput, match="conversation 1: message 'm' created_at 'soon' is not an ISO-8601 time"):
        list(claude_turns(path))


# --- through `agent-memory ingest` ----------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_ingest_a_chatgpt_export_then_a_later_one_writes_only_what_is_new(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, path = str(tmp_path / "mem"), tmp_path / "conversations.json"
    path.write_text(json.dumps([porto_chat()]))
    code, out, _ = run(capsys, "--data-dir", data, "ingest", "--format", "chatgpt", str(path))
    assert code == 0 and "ingested 3 turns" in out, out

    later = gpt_node("u4", "u3", "user", "The move is now set for 14 June.", seconds=900)
    path.write_text(json.dumps([porto_chat([later])]))  # the same conversation, exported again with one more message
    export = tmp_path / "chatgpt-export.zip"  # and given as downloaded, its format told from the file
    with zipfile.ZipFile(export, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(path, "conversations.json")
        archive.writestr("chat.html", "<html></html>")
    code, out, err = run(capsys, "--data-dir", data, "ingest", str(export))
    assert code == 0 and "ingested 1 turns" in out and "3 already stored, skipped" in out, out
    assert "chatgpt-export.zip is read as a ChatGPT export" in err, err
    with sqlite3.connect(Path(data) / "memory.db") as db:
        keys = sorted(db.execute("SELECT session_id, turn_number FROM turns").fetchall())
    assert keys == [("chatgpt/c-porto", 3), ("chatgpt/c-porto", 7), ("chatgpt/c-porto", 8), ("chatgpt/c-porto", 10)]

    code, out, _ = run(capsys, "--data-dir", data, "search", "where is the cat moving?", "-k", "1", "--json")
    assert code == 0 and "Miso" in json.loads(out)[0]["content"]


def test_ingest_refuses_a_broken_export_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([porto_chat()])[:-40])  # cut off mid-way, as a failed download is
    code, _, err = run(capsys, "--data-dir", str(tmp_path / "mem"), "ingest", "--format", "chatgpt", str(path))
    assert code == 2 and "conversations.json line 1 column" in err and "malformed JSON" in err, err
    assert not (tmp_path / "mem" / "memory.db").exists() or sqlite3.connect(tmp_path / "mem" / "memory.db").execute(
        "SELECT count(*) FROM turns"
    ).fetchone() == (0,)
