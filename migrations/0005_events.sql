-- Client events (POST /app/events) aggregated per minute. Each replica counts the events it
-- receives in memory by (event, carrier, region, reason, host, convergence side) and rewrites its
-- rows of the recent minutes every few seconds; the admin API sums every replica's rows, so
-- any replica answers for the fleet. A row replaces itself (the key names the replica), so a
-- flush retried after a lost reply never counts twice. Rows past the retention are deleted.
CREATE TABLE event_minutes (
    -- Minutes since the Unix epoch, by the receiving replica's clock.
    minute BIGINT NOT NULL,
    replica TEXT NOT NULL,
    event TEXT NOT NULL,
    isp TEXT NOT NULL,
    region TEXT NOT NULL,
    reason TEXT NOT NULL,
    -- The unified CDN host of request and host_switch events when it is one of the config
    -- center's hosts, "other" when not, "" for events without a host.
    host TEXT NOT NULL,
    -- "on", "off" or "unknown": which side of the convergence switch the device was on.
    grp TEXT NOT NULL,
    -- Events, sampled ones weighted by 1/sample_rate.
    count DOUBLE PRECISION NOT NULL,
    -- Sum and number of the durations the events carried (milliseconds).
    duration_ms_sum DOUBLE PRECISION NOT NULL,
    duration_count DOUBLE PRECISION NOT NULL,
    CONSTRAINT event_minutes_pkey PRIMARY KEY (minute, replica, event, isp, region, reason, host, grp)
);
CREATE INDEX event_minutes_minute ON event_minutes (minute);
