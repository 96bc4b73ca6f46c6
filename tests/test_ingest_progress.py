"""`agent-memory ingest`'s turns/s and ETA count the wall time of the batches that wrote turns, the wait for their
embeddings included: the model embeds a batch ahead while the one before is written, and a rate of the writes
alone read 346-387 turns/s on LoCoMo dev while the import ran at 174."""

from __future__ import annotations

import io
from dataclasses import dataclass

from agent_memory.interfaces.cli_ingest import Progress, Tally


@dataclass(frozen=True)
class Done:
    """What the tally reads of a processed turn (interfaces.routing.Processed)."""

    saved: bool = True
    chunks: int = 0


def results(n: int) -> list[Done]:
    return [Done() for _ in range(n)]


def test_the_rate_counts_each_batch_from_the_end_of_the_one_before() -> None:
    tally = Tally()
    tally.begin(10.0)
    tally.add(results(64))  # waited 1.5 s for its embeddings, then wrote for 0.5 s
    tally.batch_ended(12.0, wrote=True)
    tally.batch_ended(12.25, wrote=False)  # a resumed import passing over stored turns: not counted
    tally.add(results(64))
    tally.batch_ended(14.25, wrote=True)
    assert tally.writing == 4.0 and tally.rate == 32.0


def test_the_eta_is_the_turns_left_at_that_rate() -> None:
    tally, out = Tally(), io.StringIO()
    tally.begin(0.0)
    tally.add(results(100))
    tally.batch_ended(4.0, wrote=True)
    progress = Progress(400, out, every=0.0)
    progress.update(100, tally)
    assert out.getvalue() == "ingest: 100/400 turns (25%), 25.0 turns/s, ETA 0:00:12\n"
