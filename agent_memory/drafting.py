"""What each turn's text says by itself, for the save decision: its features, whether it is phatic, its emotion
(the caller's wins) and its entities. Pure reading, no store; run on worker threads so the event loop never does it.

An import's drafts (`bulk`) run on a thread of their own that gives way to the rest of the process on Linux
(embeddings/priority.py), as the import's model passes do: a question asked of a daemon during an import waits
less for the CPU (docs/benchmarks.md, "A question while an import runs")."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from agent_memory.cognition.emotion import EmotionScorer
from agent_memory.cognition.extraction import SimpleExtractor
from agent_memory.cognition.salience import text_features
from agent_memory.embeddings.priority import give_way
from agent_memory.models import LogRecord
from agent_memory.save_decider import Draft, phatic


class Drafter:
    def __init__(self, *, extractor: SimpleExtractor, emotion: EmotionScorer) -> None:
        self.extractor, self.emotion = extractor, emotion
        self._import_thread = ThreadPoolExecutor(1, thread_name_prefix="import-drafts", initializer=give_way)

    async def drafts(self, records: Sequence[LogRecord], *, bulk: bool) -> list[Draft]:
        """Each record's draft, on a worker thread: an import's on the thread that gives way."""

        def each() -> list[Draft]:
            return [self.draft(r) for r in records]

        if bulk:
            return await asyncio.get_running_loop().run_in_executor(self._import_thread, each)
        return await asyncio.to_thread(each)

    def draft(self, record: LogRecord) -> Draft:
        given = record.emotional_context
        emotion, source = (given, "caller") if given is not None else (self.emotion.score(record.content), "lexicon")
        text = record.content
        return Draft(record, text_features(text), phatic(record), emotion, source, self.extractor.entities(text))

    async def aclose(self) -> None:
        """Stop the import's thread (started by the first import)."""
        await asyncio.to_thread(self._import_thread.shutdown)
