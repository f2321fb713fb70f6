//! Settings built from a whole section of the file: the mirror's images, client events, live
//! scores, and the placeholder secrets check.

use std::time::Duration;

use httpdns_catalog::LiveSettings;
use httpdns_events::EventSettings;

use super::{err, ConfigError, EventsFile, LiveFile, MirrorFile};

/// The secret settings whose values are shipped placeholders, in a fixed order.
pub(super) fn placeholder_secrets(
    admin_token: Option<&str>,
    signing_key: Option<&str>,
    database_url: &str,
    s3_secret: Option<&str>,
) -> Vec<&'static str> {
    use crate::demo_secrets::{database_password, is_placeholder, is_placeholder_signing_key};
    let mut found = Vec::new();
    if admin_token.is_some_and(is_placeholder) {
        found.push("HTTPDNS_ADMIN_TOKEN");
    }
    if signing_key.is_some_and(is_placeholder_signing_key) {
        found.push("HTTPDNS_CONFIG_SIGNING_KEY");
    }
    if database_password(database_url).is_some_and(|p| is_placeholder(&p)) {
        found.push("HTTPDNS_DATABASE_URL");
    }
    if s3_secret.is_some_and(is_placeholder) {
        found.push("AWS_SECRET_ACCESS_KEY");
    }
    found
}

/// The image settings of the mirror: `HTTPDNS_MIRROR_IMAGE_MEMORY_MB` (default 1024, 16 to
/// 1048576), `HTTPDNS_MIRROR_IMAGE_WAIT_MS` (default 5000, 0 to 60000) and
/// `HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES` (default 8 MiB, 0 stores none), or their
/// `[mirror]` keys. One render needs its estimated peak within the budget, so the budget also
/// bounds the largest image that can be processed (about 650 MiB for a 50 M-pixel original).
pub(super) fn mirror_images(
    file: &MirrorFile,
    memory_mb: Option<String>,
    wait_ms: Option<String>,
    max_store: Option<String>,
) -> Result<httpdns_mirror::ImageSettings, ConfigError> {
    let number = |setting: &str, v: Option<String>, file: Option<u64>, default: u64, min: u64, max: u64| {
        let n = match v {
            Some(v) => v.trim().parse::<u64>().map_err(|_| err(setting, "must be a whole number"))?,
            None => file.unwrap_or(default),
        };
        if !(min..=max).contains(&n) {
            return Err(err(setting, format!("must be {min} to {max}")));
        }
        Ok(n)
    };
    let defaults = httpdns_mirror::ImageSettings::default();
    let memory_mb =
        number("HTTPDNS_MIRROR_IMAGE_MEMORY_MB", memory_mb, file.image_memory_mb, 1024, 16, 1 << 20)?;
    let wait_ms = number("HTTPDNS_MIRROR_IMAGE_WAIT_MS", wait_ms, file.image_wait_ms, 5000, 0, 60_000)?;
    let max_store = number(
        "HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES",
        max_store,
        file.variant_max_store_bytes,
        defaults.max_store_bytes,
        0,
        1 << 40,
    )?;
    Ok(httpdns_mirror::ImageSettings {
        memory_bytes: memory_mb << 20,
        memory_wait: Duration::from_millis(wait_ms),
        max_store_bytes: max_store,
        ..defaults
    })
}

pub(super) fn event_settings(f: &EventsFile) -> Result<EventSettings, ConfigError> {
    let d = EventSettings::default();
    fn within<T: PartialOrd + Copy + std::fmt::Display>(
        field: &str,
        v: Option<T>,
        default: T,
        min: T,
        max: T,
    ) -> Result<T, ConfigError> {
        match v {
            None => Ok(default),
            Some(x) if x >= min && x <= max => Ok(x),
            Some(_) => Err(err(format!("events.{field}"), format!("must be {min} to {max}"))),
        }
    }
    let hours = |field: &str, v: Option<u64>, default: Duration, max: u64| {
        within(field, v, default.as_secs() / 3600, 1, max).map(|h| Duration::from_secs(h * 3600))
    };
    let rate = within("rate_per_client", f.rate_per_client, d.rate_per_client, 0.001, 1e6)?;
    let retention = hours("retention_hours", f.retention_hours, d.retention, 24 * 366)?;
    let max_age = hours("max_age_hours", f.max_age_hours, d.max_age, 24 * 30)?;
    Ok(EventSettings {
        flush_interval: Duration::from_millis(within(
            "flush_ms",
            f.flush_ms,
            d.flush_interval.as_millis() as u64,
            100,
            60_000,
        )?),
        retention,
        max_batch: within("max_batch", f.max_batch, d.max_batch, 1, 10_000)?,
        max_body_bytes: within("max_body_bytes", f.max_body_bytes, d.max_body_bytes, 1024, 64 << 20)?,
        max_age,
        rate_per_client: rate,
        burst: within("burst", f.burst, d.burst, 1.0, 1e6)?,
        max_label_pairs: within("max_label_pairs", f.max_label_pairs, d.max_label_pairs, 1, 100_000)?,
        alert_rate: within("alert_rate", f.alert_rate, d.alert_rate, 0.0001, 1.0)?,
        alert_min_requests: within(
            "alert_min_requests",
            f.alert_min_requests,
            d.alert_min_requests,
            0.0,
            1e12,
        )?,
        alert_min_reports: within("alert_min_reports", f.alert_min_reports, d.alert_min_reports, 0.0, 1e12)?,
    })
}

pub(super) fn live_settings(f: &LiveFile) -> Result<LiveSettings, ConfigError> {
    let d = LiveSettings::default();
    let ms = |field: &str,
              v: Option<u64>,
              default: Duration,
              min: u64,
              max: u64|
     -> Result<Duration, ConfigError> {
        match v {
            None => Ok(default),
            Some(x) if (min..=max).contains(&x) => Ok(Duration::from_millis(x)),
            Some(_) => Err(err(format!("live.{field}"), format!("must be {min} to {max} milliseconds"))),
        }
    };
    let mut feedback = d.feedback;
    if let Some(n) = f.feedback_min_clients {
        if !(1..=100).contains(&n) {
            return Err(err("live.feedback_min_clients", "must be 1 to 100"));
        }
        feedback.min_clients = n;
    }
    feedback.client_ttl_ms = ms(
        "feedback_client_ttl_ms",
        f.feedback_client_ttl_ms,
        Duration::from_millis(feedback.client_ttl_ms),
        1000,
        86_400_000,
    )?
    .as_millis() as u64;
    if let Some(p) = f.feedback_failure_penalty_ms {
        if !(p.is_finite() && (0.0..=60_000.0).contains(&p)) {
            return Err(err("live.feedback_failure_penalty_ms", "must be 0 to 60000"));
        }
        feedback.failure_penalty_ms = p;
    }
    let positive = |field: &str, v: Option<f64>, default: f64| -> Result<f64, ConfigError> {
        match v {
            None => Ok(default),
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            Some(_) => Err(err(format!("live.{field}"), "must be a number > 0")),
        }
    };
    Ok(LiveSettings {
        refresh_interval: ms("refresh_interval_ms", f.refresh_interval_ms, d.refresh_interval, 50, 600_000)?,
        report_fresh: ms("report_fresh_ms", f.report_fresh_ms, d.report_fresh, 0, 86_400_000)?,
        report_decay: ms("report_decay_ms", f.report_decay_ms, d.report_decay, 0, 86_400_000)?,
        feedback_flush: ms("feedback_flush_ms", f.feedback_flush_ms, d.feedback_flush, 100, 3_600_000)?,
        feedback,
        feedback_rate: positive("feedback_rate_per_client", f.feedback_rate_per_client, d.feedback_rate)?,
        feedback_burst: positive("feedback_burst", f.feedback_burst, d.feedback_burst)?,
        feedback_max_batch: match f.feedback_max_batch {
            None => d.feedback_max_batch,
            Some(n) if (1..=10_000).contains(&n) => n,
            Some(_) => return Err(err("live.feedback_max_batch", "must be 1 to 10000")),
        },
        probe_workers: match f.probe_workers {
            None => d.probe_workers,
            Some(n) if (1..=4096).contains(&n) => n,
            Some(_) => return Err(err("live.probe_workers", "must be 1 to 4096")),
        },
    })
}
