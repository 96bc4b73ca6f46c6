-- Retrieval by time window (issue #3): memories in a namespace by event time.
CREATE INDEX memories_event_at ON memories (namespace, event_at);
