-- The policy controller (docs/policy.md).
--
-- Client events split by the device's side of its place's httpdnsRate ("on", "off", or
-- "unknown" for devices that do not say), per minute, replica, carrier and region: written by
-- the same flush as event_minutes, from the same in-memory counts. A table of its own so that
-- replicas still running the previous release keep writing event_minutes unchanged.
CREATE TABLE policy_minutes (
    minute BIGINT NOT NULL,
    replica TEXT NOT NULL,
    isp TEXT NOT NULL,
    region TEXT NOT NULL,
    cohort TEXT NOT NULL,
    -- Sampled request events, weighted; those that failed (not ok, not 4xx); dns_fallback events.
    requests DOUBLE PRECISION NOT NULL,
    errors DOUBLE PRECISION NOT NULL,
    fallbacks DOUBLE PRECISION NOT NULL,
    -- Sum and number of the request latencies (milliseconds).
    latency_ms_sum DOUBLE PRECISION NOT NULL,
    latency_count DOUBLE PRECISION NOT NULL,
    CONSTRAINT policy_minutes_pkey PRIMARY KEY (minute, replica, isp, region, cohort)
);
CREATE INDEX policy_minutes_minute ON policy_minutes (minute);

-- Each place's state as the controller last decided it; the config center renders every
-- device's `resolution` from these rows (loaded with the config version they belong to).
CREATE TABLE policy_places (
    isp TEXT NOT NULL,
    region TEXT NOT NULL,
    -- healthy | degraded | recovering
    state TEXT NOT NULL,
    -- Index into HTTPDNS_POLICY_RAMP of the share in force (the last index when healthy).
    step BIGINT NOT NULL,
    -- The share of the place's httpdnsRate in force.
    share DOUBLE PRECISION NOT NULL,
    -- Milliseconds since the Unix epoch when the current step began.
    since BIGINT NOT NULL,
    -- The place's failure-rate threshold, from its own history.
    threshold DOUBLE PRECISION NOT NULL,
    -- The last evaluation's figures (JSON), for the admin API and the console.
    rates TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    CONSTRAINT policy_places_pkey PRIMARY KEY (isp, region)
);

-- Every change of a place's state or step, with its reason.
CREATE TABLE policy_steps (
    at BIGINT NOT NULL,
    isp TEXT NOT NULL,
    region TEXT NOT NULL,
    from_state TEXT NOT NULL,
    to_state TEXT NOT NULL,
    from_share DOUBLE PRECISION NOT NULL,
    to_share DOUBLE PRECISION NOT NULL,
    reason TEXT NOT NULL,
    -- The config versions the change published, "module:version" comma-separated.
    versions TEXT NOT NULL,
    CONSTRAINT policy_steps_pkey PRIMARY KEY (at, isp, region)
);
CREATE INDEX policy_steps_place ON policy_steps (isp, region, at);

-- Leases: one holder at a time across replicas (the policy controller's leadership).
CREATE TABLE leases (
    name TEXT NOT NULL,
    holder TEXT NOT NULL,
    -- Milliseconds since the Unix epoch.
    expires_at BIGINT NOT NULL,
    CONSTRAINT leases_pkey PRIMARY KEY (name)
);
