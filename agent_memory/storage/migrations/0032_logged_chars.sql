-- How long a memory's turn was as logged, in characters, once compression (sleep/compress.py) has cut its words:
-- NULL while its content is its turn's words as logged, or was never a turn's. Retrieval asks whether a turn is
-- short enough to lean on its neighbours (`retrieval.locality_max_chars`: the session lift and the NEXT hops) by
-- this length, for a turn long when said stays self-contained after a cut; by its cut words, a 3,000-character
-- answer cut to 500 counted as a short reply and was lifted with its whole session. Memories cut before this
-- migration get theirs from the log on the compress job's next run (`Compressor.count_logged`).
ALTER TABLE memories ADD COLUMN logged_chars INTEGER CHECK (logged_chars IS NULL OR logged_chars >= 0);
