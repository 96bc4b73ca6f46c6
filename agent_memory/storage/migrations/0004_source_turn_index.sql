-- The grep layer maps log offsets to turns and turns to their memories: without this index each lookup read every
-- memory (50 lookups took 1.7 s at 10k memories; 0.8 ms with it).
CREATE INDEX memories_source_turn ON memories (source_turn_id);
