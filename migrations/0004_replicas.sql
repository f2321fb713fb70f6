-- Replicas that announce public entry points (HTTPDNS_PUBLIC_ADDRS) for Alibaba's `/ss`.
-- Each running replica rewrites its row every few seconds; readers drop a row that stops
-- changing, so a dead replica leaves `/ss` within seconds. Rows of replicas gone for a day
-- are deleted by the survivors.
CREATE TABLE replicas (
    id TEXT NOT NULL,
    -- JSON array of "ip" or "ip:port" ("[v6]:port") strings.
    addrs TEXT NOT NULL,
    -- Milliseconds since the Unix epoch, by the replica's clock.
    seen_at BIGINT NOT NULL,
    CONSTRAINT replicas_pkey PRIMARY KEY (id)
);
