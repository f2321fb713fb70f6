-- Issue 38: the policy controller's evidence also counts raw reports. `requests` is weighted by
-- each event's 1 / sample_rate, so one event sampled at 1e-6 weighs a million; a decision needs
-- enough reports as well (HTTPDNS_POLICY_MIN_REPORTS). NULL in rows written by replicas of the
-- previous release: read as `requests` (their weight was the report count unless sampled).
ALTER TABLE policy_minutes ADD COLUMN reports DOUBLE PRECISION;
