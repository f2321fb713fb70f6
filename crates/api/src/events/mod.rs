//! The HTTP side of client events (docs/observability.md), over `httpdns-events`:
//!
//! * `intake`: `POST /app/events` (gzip, signed or rate limited, all or nothing).
//! * `admin`: `/admin/v1/events/summary` and `/admin/v1/localdns/map`, from every replica's
//!   rows.
//! * `series`: `/admin/v1/events/series`, the same per bucket of minutes, for the console.

pub(crate) mod admin;
pub(crate) mod intake;
pub(crate) mod series;
