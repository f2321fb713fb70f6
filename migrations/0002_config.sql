-- Config center: named modules, each an append-only sequence of versions. A version's
-- content never changes; a rollback appends the old content as a new, higher version.
CREATE TABLE config_modules (
    module TEXT NOT NULL,
    current_version BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    CONSTRAINT config_modules_pkey PRIMARY KEY (module)
);

CREATE TABLE config_versions (
    module TEXT NOT NULL,
    version BIGINT NOT NULL,
    document TEXT NOT NULL,
    author TEXT NOT NULL,
    summary TEXT NOT NULL,
    rollback_of BIGINT,
    created_at BIGINT NOT NULL,
    CONSTRAINT config_versions_pkey PRIMARY KEY (module, version)
);
