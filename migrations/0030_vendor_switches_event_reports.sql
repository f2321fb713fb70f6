-- Issue 38: the vendors' server-side switches, and the raw number of event reports.
--
-- The switches operators set for the vendors' SDKs (docs/api.md, "Vendor switches"): one row
-- per scope, "global" or an account id, its body the JSON the admin API took. Every replica
-- reads the table every few seconds, so a change reaches all of them without a restart.
CREATE TABLE vendor_switches (
    scope TEXT NOT NULL,
    body TEXT NOT NULL,
    -- Milliseconds since the Unix epoch.
    updated_at BIGINT NOT NULL,
    CONSTRAINT vendor_switches_pkey PRIMARY KEY (scope)
);

-- Events as received, unweighted (count is weighted by 1/sample_rate): the summary judges a
-- place only with enough real reports behind its weighted requests. NULL in the rows of
-- replicas of an earlier release, read as count.
ALTER TABLE event_minutes ADD COLUMN reports DOUBLE PRECISION;
