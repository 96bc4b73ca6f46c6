-- Keyword reweighting is off by default from this version (`sleep.keyword_boost` 0; docs/benchmarks.md, "Sleep jobs
-- by folds": at 0.5 it cost LoCoMo dev recall in two folds of three on both stores and paid nothing on LongMemEval
-- dev). The weights the job wrote at the old default are derived data, made again by the job whenever a user sets
-- a boost; they are removed here so that an upgraded store ranks as a new one does.
DELETE FROM keyword_weights;
