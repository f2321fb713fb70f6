-- The config center for a team (issue 42): named admin tokens with roles, and the audit log.
--
-- A token is stored as the SHA-256 of its secret only (hex): the secret is shown once when it is
-- made. Deleting the row revokes it on every replica at once (the guard reads this table).
CREATE TABLE admin_tokens (
    name TEXT NOT NULL,
    -- "viewer", "operator" or "admin".
    role TEXT NOT NULL,
    token_sha256 TEXT NOT NULL,
    created_by TEXT NOT NULL,
    -- Milliseconds since the Unix epoch.
    created_at BIGINT NOT NULL,
    CONSTRAINT admin_tokens_pkey PRIMARY KEY (name),
    CONSTRAINT admin_tokens_hash_key UNIQUE (token_sha256)
);

-- One counter row numbers the audit entries: a sequence both backends write the same way
-- (the row lock orders concurrent appenders on PostgreSQL; SQLite has one writer).
CREATE TABLE audit_meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL
);
INSERT INTO audit_meta (id, seq) VALUES (1, 0);

-- Every change: through the admin API and the console (actor: the token's name, or "admin"
-- for HTTPDNS_ADMIN_TOKEN), and the automatic ones ("controller", "rollout"). Append-only.
CREATE TABLE audit_log (
    seq BIGINT NOT NULL,
    -- Milliseconds since the Unix epoch, by the writing replica's clock.
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    -- The store revision (or, for a config module, its version) before and after the change.
    revision_before BIGINT,
    revision_after BIGINT,
    status BIGINT NOT NULL,
    detail TEXT NOT NULL,
    CONSTRAINT audit_log_pkey PRIMARY KEY (seq)
);

-- Adoption: distinct devices per config version, as HyperLogLog sketches (4,096 one-byte
-- registers, base64) per 5-minute bucket, module and version, one row per replica (a flush
-- rewrites the replica's own rows, so a retried flush never counts twice). Readers merge every
-- replica's and bucket's sketch of the window. Rows past a week are deleted.
CREATE TABLE adoption_sketches (
    -- Unix seconds / 300.
    bucket BIGINT NOT NULL,
    replica TEXT NOT NULL,
    module TEXT NOT NULL,
    version BIGINT NOT NULL,
    registers TEXT NOT NULL,
    CONSTRAINT adoption_sketches_pkey PRIMARY KEY (bucket, replica, module, version)
);
CREATE INDEX adoption_sketches_module ON adoption_sketches (module, bucket);

-- Guarded rollouts: at most one per module. `previous` is the version the rest of the devices
-- keep; the newest version (once published after it) goes to `share` of them by device hash.
-- Every change of a row takes a store revision and is announced (NOTIFY), so every replica
-- serves the same share; a tick's change is conditional on `updated_at`, so of replicas ticking
-- together one decides.
CREATE TABLE config_rollouts (
    module TEXT NOT NULL,
    previous BIGINT NOT NULL,
    -- The version rolled out, once a decision was taken about it (NULL before).
    version BIGINT,
    -- The spec as given (JSON).
    spec TEXT NOT NULL,
    -- "running", "paused", "rolled_back", "done".
    state TEXT NOT NULL,
    step BIGINT NOT NULL,
    share DOUBLE PRECISION NOT NULL,
    -- Milliseconds since the Unix epoch.
    step_started BIGINT NOT NULL,
    reason TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    CONSTRAINT config_rollouts_pkey PRIMARY KEY (module)
);

-- Client events by the config version the device runs, per minute, carrier and region (what
-- rollouts compare), one row per replica like event_minutes.
CREATE TABLE config_version_minutes (
    minute BIGINT NOT NULL,
    replica TEXT NOT NULL,
    version BIGINT NOT NULL,
    isp TEXT NOT NULL,
    region TEXT NOT NULL,
    requests DOUBLE PRECISION NOT NULL,
    errors DOUBLE PRECISION NOT NULL,
    fallbacks DOUBLE PRECISION NOT NULL,
    CONSTRAINT config_version_minutes_pkey PRIMARY KEY (minute, replica, version, isp, region)
);
CREATE INDEX config_version_minutes_minute ON config_version_minutes (minute);
