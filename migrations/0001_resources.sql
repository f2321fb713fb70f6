-- Revisioned admin resources. Every write takes the next store revision, so replicas and the
-- local snapshot builder can fetch "everything after revision N" and never miss a change.
-- A deleted resource keeps its row with a NULL body (a tombstone) for the same reason.
CREATE TABLE store_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    revision BIGINT NOT NULL
);
INSERT INTO store_meta (id, revision) VALUES (1, 0);

CREATE TABLE resources (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    body TEXT,
    revision BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    CONSTRAINT resources_pkey PRIMARY KEY (kind, name)
);
CREATE INDEX resources_revision ON resources (revision);
