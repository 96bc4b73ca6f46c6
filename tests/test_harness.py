"""The benchmark harness, scored on a tiny hand-made dataset whose answers are known."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from agent_memory.bench.folds import AS_INGESTED, after_sleep, compare, parse_variants, stores_apart
from agent_memory.bench.harness import PLAIN_BM25, Scores, ablation_configs, against_plain, format_report, run_bench
from agent_memory.bench.questions import Question, locomo_questions, longmemeval_questions
from agent_memory.config import Config, RetrievalConfig
from agent_memory.embeddings.text import Embedder
from agent_memory.interfaces.cli import main
from agent_memory.manager import MemoryManager

LOCOMO = [
    {
        "sample_id": "tiny-1",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "10:00 am on 3 March, 2024",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a grey cat named Pixel last week."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! My sister breeds parrots in Leeds."},
                {"speaker": "Ana", "dia_id": "D1:3", "text": "My pottery class starts on Thursday evenings."},
            ],
            "session_2_date_time": "4:30 pm on 20 April, 2024",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "I ran the Brighton half marathon in 1:52."},
                {
                    "speaker": "Ana",
                    "dia_id": "D2:2",
                    "text": "Pixel knocked my new vase off the shelf.",
                    "blip_caption": "a cat next to a broken vase",
                },
            ],
        },
        "qa": [
            {"question": "What is the name of Ana's cat?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
            {"question": "What did Ana's cat break?", "answer": "a vase", "evidence": ["D2:2", "D1:1"], "category": 1},
            {"question": "What was Ben's half marathon time?", "answer": "1:52", "evidence": ["D:2:01"], "category": 2},
            {"question": "Unscorable", "answer": "x", "evidence": ["D9:9"], "category": 3},
        ],
    }
]


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_locomo.json"
    path.write_text(json.dumps(LOCOMO), encoding="utf-8")
    return path


def test_locomo_questions_normalise_evidence_and_drop_unknown_ids(locomo_file: Path) -> None:
    questions = list(locomo_questions(locomo_file))
    assert [q.question_id for q in questions] == ["tiny-1:0", "tiny-1:1", "tiny-1:2"]  # D9:9 does not exist
    assert questions[1].gold == {("tiny-1", "session_2", 1), ("tiny-1", "session_1", 0)}
    assert questions[2].gold == {("tiny-1", "session_2", 0)}  # "D:2:01" normalised
    assert questions[0].category == "single-hop" and questions[1].category == "multi-hop"
    assert questions[0].asked_at.isoformat() == "2024-04-21T16:30:00+00:00"  # a day after the last session


BIKE = {  # a LongMemEval question and its haystack of two sessions
    "question_id": "q1",
    "question_type": "single-session-user",
    "question": "What colour is my bike?",
    "question_date": "2023/06/01 (Thu) 10:00",
    "answer": "red",
    "answer_session_ids": ["s_b"],
    "haystack_dates": ["2023/05/01 (Mon) 09:00", "2023/05/02 (Tue) 09:00"],
    "haystack_session_ids": ["s_a", "s_b"],
    "haystack_sessions": [
        [{"role": "user", "content": "Hi", "has_answer": True}],
        [{"role": "user", "content": "Tea?"}, {"role": "user", "content": "My bike is red", "has_answer": True}],
    ],
}


def test_longmemeval_questions_take_has_answer_turns(tmp_path: Path) -> None:
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([BIKE]), encoding="utf-8")
    (question,) = longmemeval_questions(path)
    assert question.gold == {("q1", "s_b", 1)}  # has_answer outside an answer session does not count
    assert question.gold_sessions == {("q1", "s_b")}


def test_scores_arithmetic() -> None:
    q = Question("q", "multi-hop", "?", "ns", None, frozenset({("ns", "s", 1), ("ns", "s", 2)}))  # type: ignore[arg-type]
    scores = Scores()
    scores.add(q, [("ns", "s", 9), ("ns", "s", 2), ("ns", "s", 1)], {("ns", "s", 2)}, 100)
    row = scores.rows[0]
    assert row["recall"] == 0.5 and row["all"] is False and row["mrr"] == 0.5
    assert (row["recall@1"], row["recall@5"]) == (0.0, 1.0)
    summary = scores.summary(["multi-hop"])
    assert summary["pooled"]["n"] == 1 and summary["by_category"]["multi-hop"]["recall"] == 0.5
    adversarial = Question("a", "adversarial", "?", "ns", None, frozenset({("ns", "s", 3)}))  # type: ignore[arg-type]
    scores.add(adversarial, [("ns", "s", 3)], {("ns", "s", 3)}, 50)
    summary = scores.summary(["multi-hop"])
    assert summary["pooled"]["recall"] == 0.5  # the headline leaves the adversarial question out
    assert summary["all_categories"]["n"] == 2 and summary["all_categories"]["recall"] == 0.75
    assert "all_categories" not in scores.summary(None)


def test_a_summary_gives_recalls_interval_and_each_conversations_recall() -> None:
    """The bootstrap resamples conversations, then their questions: with every question found in one conversation
    and none in the other, the interval spans both; a conversation per question (LongMemEval) has no folds."""
    scores = Scores()
    for namespace, found in (("conv-1", True), ("conv-1", True), ("conv-2", False), ("conv-2", False)):
        gold = frozenset({(namespace, "s", 1)})
        question = Question(namespace, "single-hop", "?", namespace, None, gold)  # type: ignore[arg-type]
        scores.add(question, [(namespace, "s", 1)], set(gold) if found else set(), 10)
    pooled = scores.summary(["single-hop"])["pooled"]
    assert pooled["recall"] == 0.5 and pooled["recall_interval"] == [0.0, 1.0]
    assert pooled["recall_by_conversation"] == {"conv-1": 1.0, "conv-2": 0.0}
    alone = Scores()
    for number in range(20):
        gold = frozenset({(f"q{number}", "s", 1)})
        question = Question(f"q{number}", "temporal", "?", f"q{number}", None, gold)  # type: ignore[arg-type]
        alone.add(question, [], set(gold) if number % 4 else set(), 10)
    pooled = alone.summary(None)["pooled"]
    low, high = pooled["recall_interval"]
    assert pooled["recall"] == 0.75 and 0.5 < low < 0.75 < high < 1.0 and "recall_by_conversation" not in pooled


def test_ablation_ladder_ends_at_the_shipped_configuration() -> None:
    base = RetrievalConfig()
    ladder = ablation_configs(base)
    assert ladder[0][1].semantic_weight == 0 and ladder[0][1].keyword_weight == 1.0
    assert ladder[1][1].keyword_weight == 0 and ladder[2][1].graph_weight == 0
    steps = dict(ladder)  # replies come in at their own step, after the speaker's, and stay on
    assert steps["+ speaker"].context_replies == 0 and steps["+ replies"].context_replies == base.context_replies
    assert ladder[-1][1] == base and PLAIN_BM25["context_replies"] == 0


async def test_harness_scores_the_tiny_dataset(manager: MemoryManager, locomo_file: Path, tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    with dump.open("w", encoding="utf-8") as out:
        said: list[str] = []
        report = await run_bench(manager, "locomo", locomo_file, budgets=[40, 2048], dump=out, progress=said.append)
    assert report["questions"] == 3 and report["turns"] == 5
    assert said[0].startswith("ingest: 5/5 turns (100%), ") and said[1].startswith("ingested 5 turns in ")
    big = report["budgets"]["2048"]["pooled"]
    assert big["recall"] == 1.0 and big["all"] == 1.0  # the whole conversation fits
    assert big["mrr"] >= 0.5
    small = report["budgets"]["40"]["pooled"]
    assert small["tokens"] <= 40 and small["recall"] < 1.0
    lines = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 6 and {"ranked", "in_context", "tokens", "context", "category"} <= set(lines[0])
    marathon = next(line for line in lines if line["question_id"] == "tiny-1:2")
    assert marathon["ranked"][0] == ["session_2", 0] == marathon["gold"][0]
    assert "budget 2048: recall 1.000" in format_report(report)
    versus = report["against_bm25"]["2048"]  # plain BM25 on the same store finds the whole conversation too
    assert versus["n"] == 3 and versus["plain_bm25"] == 1.0 and versus["delta"] == 0.0
    assert versus["bm25_finds_more"] == versus["finds_more"] == 0
    assert report["against_bm25"]["40"]["n"] == 3
    assert manager.config.retrieval == RetrievalConfig.model_validate(report["retrieval_config"])  # put back
    assert "against plain BM25 on this store (the keyword layer alone): 1.000, difference +0.000" in format_report(
        report
    )


async def test_a_store_per_conversation_is_compared_question_by_question_with_the_shared_store(
    config: Config, embedder: Embedder, tmp_path: Path
) -> None:
    """`bench_folds.py --apart`: the harness's one store (a namespace per conversation) against a fresh store for
    each conversation alone, paired per question in the folds' shape."""
    data = json.loads(json.dumps(LOCOMO))
    second = json.loads(json.dumps(LOCOMO[0]))
    second["sample_id"] = "tiny-2"
    second["qa"] = second["qa"][:1]
    path = tmp_path / "two.json"
    path.write_text(json.dumps([*data, second]), encoding="utf-8")
    shared = config.model_copy(update={"data_dir": tmp_path / "shared"})
    async with MemoryManager.open(shared, embedder=embedder) as manager:
        await run_bench(manager, "locomo", path, budgets=[2048])
    results = await stores_apart(tmp_path / "shared", "locomo", path, budget=2048)
    assert set(results) == {"one store", "a store each"}
    for figures in results.values():
        assert {g: len(v) for g, v in figures["recall"].items()} == {"tiny-1": 3, "tiny-2": 1}
        assert all(x == 1.0 for v in figures["recall"].values() for x in v)  # each conversation fits the budget
    report = compare(results, "one store")
    assert report["a store each"]["recall"]["delta"] == 0.0 and set(report["a store each"]["mrr"]["folds"]) == {
        "tiny-1",
        "tiny-2",
    }


async def test_sleep_settings_are_judged_on_copies_of_the_store_after_their_jobs_ran(
    config: Config, embedder: Embedder, locomo_file: Path, tmp_path: Path
) -> None:
    """`bench_folds.py --sleep-variant`: each variant's jobs run on a copy of the store with its settings, and the
    store itself is asked as ingested and left as it was."""
    store = tmp_path / "store"
    async with MemoryManager.open(config.model_copy(update={"data_dir": store}), embedder=embedder) as manager:
        await run_bench(manager, "locomo", locomo_file, budgets=[2048])
        before = await manager.records.stored_texts()
    variants = parse_variants(
        ["old ones forgotten=forget_older_than:2592000", 'assistant forgotten=forget_roles:["assistant"]'], "sleep"
    )
    with pytest.raises(ValueError, match=r"cannot leave out \['digest'\]: the jobs run are \['forget'\]"):
        await after_sleep(store, "locomo", locomo_file, variants, jobs=("forget",), without=("digest",))
    results = await after_sleep(
        store, "locomo", locomo_file, variants, jobs=("forget", "digest"), without=("forget",), budget=2048
    )
    names = ["shipped defaults", "old ones forgotten", "assistant forgotten", "without forget"]
    assert list(results) == [AS_INGESTED, *names]
    recall = {name: figures["recall"]["tiny-1"] for name, figures in results.items()}
    assert recall[AS_INGESTED] == recall["shipped defaults"] == recall["assistant forgotten"] == [1.0, 1.0, 1.0]
    assert recall["without forget"] == [1.0, 1.0, 1.0]
    # 30 days before the questions: the first session (3 March) is forgotten, the second (20 April) is not
    assert recall["old ones forgotten"] == [0.0, 0.5, 1.0]
    async with MemoryManager.open(config.model_copy(update={"data_dir": store}), embedder=embedder) as manager:
        assert await manager.records.stored_texts() == before  # the copies took the jobs, not the store
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("agent-memory-sleep-")]  # no copy is left


async def test_a_sleep_job_that_fails_stops_the_comparison_with_its_error(
    config: Config, embedder: Embedder, locomo_file: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    async with MemoryManager.open(config.model_copy(update={"data_dir": store}), embedder=embedder) as manager:
        await run_bench(manager, "locomo", locomo_file, budgets=[2048])
    variants = parse_variants(["no time=job_timeout:0.000001"], "sleep")
    with pytest.raises(RuntimeError, match="variant 'no time': sleep job digest failed: timed out"):
        await after_sleep(store, "locomo", locomo_file, variants, budget=2048)


def test_bench_cli_writes_the_report(locomo_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    code = main(["bench", "locomo", "--data", str(locomo_file), "--budget", "2048", "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["budgets"]["2048"]["pooled"]["recall"] == 1.0
    assert "locomo: 3 questions, 5 turns" in capsys.readouterr().out
    assert main(["bench", "locomo", "--data", str(tmp_path / "missing.json")]) == 2


async def test_the_lifecycle_counts_a_merged_memory_through_its_lineage(manager: MemoryManager, tmp_path: Path) -> None:
    data = json.loads(json.dumps(LOCOMO))
    session = data[0]["conversation"]["session_2"]
    again = "I adopted a grey cat named Pixel last week. She sleeps on my keyboard all day."
    session.append({"speaker": "Ana", "dia_id": "D2:3", "text": again})
    path = tmp_path / "redundant.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    report = await run_bench(manager, "locomo", path, budgets=[2048], sleep=True)
    life = report["lifecycle"]
    assert all(job["status"] == "ok" for job in life["jobs"].values()), life["jobs"]
    assert life["jobs"]["compact"]["counts"]["accepted"] == 1, life["jobs"]["compact"]
    tokens = life["stored_tokens"]
    assert tokens["after"] < tokens["before"] and tokens["shrink"] > 0  # the digests apart
    assert tokens["digests_before"] == 0 and tokens["shrink_with_digests"] == tokens["shrink"]
    assert life["jobs"]["digest"]["counts"]["digests_new"] == tokens["digests"] == 0  # the merge holds both statements
    assert life["recall"]["2048"] == {"before": 1.0, "after": 1.0, "change": 0.0}  # D1:1 is found through the merge
    (merged,) = [c for c in await manager.records.compactions() if c.status == "accepted"]
    lineage = await manager.records.lineage_turns([merged.merged_into or ""])
    assert lineage[merged.merged_into or ""] == [("session_1", 0), ("session_2", 2)]


async def test_the_lifecycle_lets_a_job_stopped_at_its_budget_catch_up(
    config: Config, embedder: Embedder, tmp_path: Path
) -> None:
    sleep = config.sleep.model_copy(update={"digest_budget": timedelta(0), "digest_batch": 2})
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(LOCOMO), encoding="utf-8")
    async with MemoryManager.open(config.model_copy(update={"sleep": sleep}), embedder=embedder) as manager:
        report = await run_bench(manager, "locomo", path, budgets=[2048], sleep=True)
        life = report["lifecycle"]
        digest = life["jobs"]["digest"]["counts"]
        assert life["catch_up_runs"] >= 2 and digest["deferred"] is False, life
        for namespace in await manager.records.memory_namespaces():
            assert await manager.records.undigested(namespace, limit=10) == ([], None)


def test_against_plain_bm25_pairs_each_question_with_its_own_bm25_figure() -> None:
    """The headline questions only, paired by question and grouped by conversation; counts each way."""
    ours, plain = Scores(), Scores()
    cases = [  # (conversation, category, our recall's gold found, BM25's)
        ("conv-1", "single-hop", True, True),
        ("conv-1", "multi-hop", True, False),
        ("conv-2", "temporal", False, True),
        ("conv-2", "adversarial", False, True),  # outside the headline: not counted
    ]
    for n, (conversation, category, found, bm25_found) in enumerate(cases):
        gold = frozenset({(conversation, "s", n)})
        question = Question(f"{conversation}:{n}", category, "?", conversation, None, gold)  # type: ignore[arg-type]
        ours.add(question, [], set(gold) if found else set(), 10)
        plain.add(question, [], set(gold) if bm25_found else set(), 10)
    versus = against_plain(ours, plain, ["single-hop", "multi-hop", "temporal"])
    assert versus["n"] == 3 and versus["plain_bm25"] == round(2 / 3, 4)
    assert (versus["bm25_finds_more"], versus["finds_more"]) == (1, 1)
    assert versus["delta"] == 0.0 and versus["interval"][0] < 0 < versus["interval"][1]
    assert set(PLAIN_BM25) <= set(RetrievalConfig.model_fields)  # each a real setting (model_copy checks none)
    plain_config = RetrievalConfig.model_validate(RetrievalConfig().model_dump() | PLAIN_BM25)
    assert plain_config.keyword_weight == 1.0 and plain_config.semantic_weight == 0.0
