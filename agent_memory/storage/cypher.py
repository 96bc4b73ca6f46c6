"""The graph's schema and every Cypher statement KuzuGraph runs, with the Kuzu 0.11 behaviours they are shaped by
(see graph.py's docstring). Plain strings: only graph.py talks to Kuzu."""

from __future__ import annotations

NODE_TABLES = {
    "Memory": "id STRING PRIMARY KEY, namespace STRING, type STRING, created_at TIMESTAMP",
    "Entity": "name STRING PRIMARY KEY",
    "Session": "id STRING PRIMARY KEY, namespace STRING, session_id STRING",
}
REL_TABLES = {
    "MENTIONS": "FROM Memory TO Entity",
    "RELATED_TO": "FROM Memory TO Memory, weight DOUBLE",
    "NEXT": "FROM Memory TO Memory",
    "IN_SESSION": "FROM Memory TO Session",
    "EVOLVED_FROM": "FROM Memory TO Memory",
    "DREAM_LINK": "FROM Memory TO Memory, weight DOUBLE, created_at TIMESTAMP",
    "SUPERSEDES": "FROM Memory TO Memory",
}
CSV_HEADERS = {
    "Memory": ("id", "namespace", "type", "created_at"),
    "Session": ("id", "namespace", "session_id"),
    "RELATED_TO": ("from", "to", "weight", "attached"),
    "DREAM_LINK": ("from", "to", "weight", "created_at"),
}
WALK_RELS = ("NEXT", "EVOLVED_FROM", "RELATED_TO", "DREAM_LINK")  # Memory to Memory, strongest first
LABEL_RANK = {label: rank for rank, label in enumerate((*WALK_RELS, "IN_SESSION", "MENTIONS"))}
# Up to this many rows, one indexed query per row beats one scanning UNWIND, and beats COPY, whose commit makes Kuzu
# checkpoint the whole database: in a 400-turn LoCoMo run the projector's commits after a COPY cost about 100 ms
# each. At 16 rows the graph took 13.8 ms of wall time per memory there; at 64, 6.4 ms.
INDEX_LOOKUPS = 64
ATTACHED_WEIGHT = 1.0  # the RELATED_TO edge from an image to the memory of the turn it was shared in

# Written for one row; `_batch` reads `$key` as `row.key` when it runs them over many rows with UNWIND.
CREATE_MEMORY = "CREATE (:Memory {id: $id, namespace: $namespace, type: $type, created_at: $created_at})"
CREATE_MEMORIES = "COPY Memory FROM (UNWIND $rows AS row RETURN row.id, row.namespace, row.type, row.created_at)"
UPDATE_MEMORY = "MATCH (m:Memory {id: $id}) SET m.namespace = $namespace, m.type = $type, m.created_at = $created_at"
MERGE_SESSION = "MERGE (s:Session {id: $key}) SET s.namespace = $namespace, s.session_id = $session_id"
MERGE_ENTITY = "MERGE (:Entity {name: $name})"
ENTITY_NAMES = "MATCH (x:Entity) RETURN x.name"
CREATE_ENTITIES = "COPY Entity FROM (UNWIND $rows AS row RETURN row.name)"
EXISTING = "MATCH (m:Memory {id: $id}) RETURN m.id"
# The edges a memory owns, replaced on every upsert: its entities, its session, and the NEXT edge into it.
UNLINK = {
    "MENTIONS": "MATCH (:Memory {id: $id})-[r:MENTIONS]->(x:Entity) DELETE r RETURN x.name",
    "IN_SESSION": "MATCH (:Memory {id: $id})-[r:IN_SESSION]->(x:Session) DELETE r RETURN x.id",
    "NEXT": "MATCH (:Memory {id: $id})<-[r:NEXT]-(:Memory) DELETE r",
}
LINK = {
    "MENTIONS": "MATCH (a:Memory {id: $src}), (b:Entity {name: $dst}) CREATE (a)-[:MENTIONS]->(b)",
    "IN_SESSION": "MATCH (a:Memory {id: $src}), (b:Session {id: $dst}) CREATE (a)-[:IN_SESSION]->(b)",
    "NEXT": "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) CREATE (a)-[:NEXT]->(b)",
}
LINK_MANY = "COPY {rel} FROM (UNWIND $rows AS row RETURN row.src, row.dst)"
# An image owns one RELATED_TO edge, marked `attached`, to its turn's memory: replaced on upsert; the other
# RELATED_TO edges stay. The column came after the table, so a graph made before it gains it on open.
ADD_ATTACHED = "ALTER TABLE RELATED_TO ADD IF NOT EXISTS attached BOOLEAN DEFAULT false"
UNLINK_ATTACHED = "MATCH (:Memory {id: $id})-[r:RELATED_TO]->(:Memory) WHERE r.attached DELETE r"
LINK_ATTACHED = (
    "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) CREATE (a)-[:RELATED_TO {weight: $weight, attached: true}]->(b)"
)
LINK_ATTACHED_MANY = "COPY RELATED_TO FROM (UNWIND $rows AS row RETURN row.src, row.dst, row.weight, row.attached)"
# The link edges a memory owns (memory_links: dream exploration, consolidation), replaced when it is re-projected.
UNLINK_OWNED = {
    "DREAM_LINK": "MATCH (:Memory {id: $id})-[r:DREAM_LINK]->(:Memory) DELETE r",
    "EVOLVED_FROM": "MATCH (:Memory {id: $id})-[r:EVOLVED_FROM]->(:Memory) DELETE r",
    "SUPERSEDES": "MATCH (:Memory {id: $id})-[r:SUPERSEDES]->(:Memory) DELETE r",
    "RELATED_TO": "MATCH (:Memory {id: $id})-[r:RELATED_TO]->(:Memory) WHERE r.attached IS NULL OR NOT r.attached DELETE r",
}
LINK_OWNED = {
    "DREAM_LINK": "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) "
    "CREATE (a)-[:DREAM_LINK {weight: $weight, created_at: $at}]->(b)",
    "EVOLVED_FROM": "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) CREATE (a)-[:EVOLVED_FROM]->(b)",
    "SUPERSEDES": "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) CREATE (a)-[:SUPERSEDES]->(b)",
    "RELATED_TO": "MATCH (a:Memory {id: $src}), (b:Memory {id: $dst}) "
    "CREATE (a)-[:RELATED_TO {weight: $weight, attached: false}]->(b)",
}
DROP_ORPHANS = {  # an entity or session nobody points to goes, so an erased memory leaves no names behind
    "MENTIONS": "MATCH (x:Entity {name: $key}) WHERE NOT EXISTS { MATCH (x)<-[:MENTIONS]-() } DELETE x",
    "IN_SESSION": "MATCH (x:Session {id: $key}) WHERE NOT EXISTS { MATCH (x)<-[:IN_SESSION]-() } DELETE x",
}
DELETE_MEMORY = "MATCH (m:Memory {id: $id}) DETACH DELETE m"
WALK = f"MATCH (:Memory {{id: $id}})-[r:{'|'.join(WALK_RELS)}]-(b:Memory) RETURN b.id, label(r)"
SHARED = (
    "MATCH (a:Memory {id: $id})-[r:MENTIONS|IN_SESSION]->()<-[:MENTIONS|IN_SESSION]-(b:Memory) "
    "WHERE b.id <> $id RETURN DISTINCT b.id, label(r)"
)
LINK_RELS = ("EVOLVED_FROM", "RELATED_TO", "DREAM_LINK")  # the edges only the graph holds (sleep jobs write them)
EXPAND = f"MATCH (a:Memory {{id: $id}})-[r:{'|'.join(LINK_RELS)}*1..$depth]-(b:Memory) RETURN b.id, length(r), properties(rels(r), '_label')"
# An image's attached edge does not count: the records answer that hop (an image and its turn share a source turn).
COUNT_LINKS = f"MATCH ()-[r:{'|'.join(LINK_RELS)}]->() WHERE r.attached IS NULL OR NOT r.attached RETURN count(r)"
ENTITIES = "MATCH (:Memory {id: $id})-[:MENTIONS]->(e:Entity) RETURN e.name ORDER BY e.name"
# Serial reading allows quoted newlines; NUL as the null string keeps an empty field an empty string.
COPY_CSV = "COPY {table} FROM '{path}' (header=true, parallel=false, null_strings=['\\u0000'])"
