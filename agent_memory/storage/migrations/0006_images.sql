-- Image memories (issue #4, the dual code). An image is a memory row like any other (its content is its caption,
-- or "[image]" and a file name); these columns say what it is. The bytes are copied into data_dir/images under
-- their SHA-256 (media_path is relative to data_dir), and the CLIP vector is kept here beside the text one, so the
-- image collection is rebuilt without the model. `embedding` (MiniLM) is NULL for an image with no caption.
ALTER TABLE memories ADD COLUMN media TEXT NOT NULL DEFAULT 'text' CHECK (media IN ('text', 'image'));
ALTER TABLE memories ADD COLUMN media_sha256 TEXT;
ALTER TABLE memories ADD COLUMN media_path TEXT;
ALTER TABLE memories ADD COLUMN image_embedding BLOB;
ALTER TABLE memories ADD COLUMN image_model TEXT;
-- Retrieval asks whether a namespace holds any image before it spends a CLIP call on the query.
CREATE INDEX memories_images ON memories (namespace, status) WHERE media = 'image';
