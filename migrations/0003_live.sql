-- Live score inputs that must outlive a process and reach every replica.
-- Node agents' reports: the latest per node.
CREATE TABLE node_reports (
    node TEXT NOT NULL,
    load_pct DOUBLE PRECISION,
    bandwidth_mbps DOUBLE PRECISION,
    latency_ms DOUBLE PRECISION,
    reported_at BIGINT NOT NULL,
    CONSTRAINT node_reports_pkey PRIMARY KEY (node)
);

-- App feedback aggregates per (node, client ISP, client region), flushed periodically.
CREATE TABLE feedback_aggregates (
    node TEXT NOT NULL,
    isp TEXT NOT NULL,
    region TEXT NOT NULL,
    latency_ms DOUBLE PRECISION NOT NULL,
    success_rate DOUBLE PRECISION NOT NULL,
    clients BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    CONSTRAINT feedback_aggregates_pkey PRIMARY KEY (node, isp, region)
);
