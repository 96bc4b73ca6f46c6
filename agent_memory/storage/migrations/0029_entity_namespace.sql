-- Each entity row carries its memory's namespace (a memory never changes namespace): the graph walk counts an
-- entity's mentions within the namespace it walks, so what another namespace holds changes nothing here. Before,
-- the count ran over the whole store: a name 30 memories of one project mentioned linked nothing in another
-- project that mentioned it twice. The index serves both the count and the walk's MENTIONS step.
ALTER TABLE memory_entities ADD COLUMN namespace TEXT NOT NULL DEFAULT '';
UPDATE memory_entities
SET namespace = coalesce((SELECT m.namespace FROM memories m WHERE m.memory_id = memory_entities.memory_id), '');
DROP INDEX memory_entities_entity;
CREATE INDEX memory_entities_scope ON memory_entities (entity, namespace);
