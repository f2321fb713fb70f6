//! The admin reads' query helpers: the raw pairs and the `window=` of a summary.

use std::time::Duration;

use crate::error::ApiError;

/// A window: `30s` is refused (minutes are the grain), `5m`, `1h`, `7d`.
pub(crate) fn window(
    raw: Option<&str>,
    default: &str,
    retention: Duration,
) -> Result<(String, i64), ApiError> {
    let raw = raw.filter(|s| !s.is_empty()).unwrap_or(default);
    let bad = || {
        ApiError::bad_request(
            "InvalidArgument",
            "window",
            format!(
                "must be a number of minutes, hours or days (5m, 1h, 7d), from 1m to the retention ({} h)",
                retention.as_secs() / 3600
            ),
        )
    };
    if !raw.is_ascii() || raw.len() < 2 {
        return Err(bad());
    }
    let (digits, unit) = raw.split_at(raw.len() - 1);
    let n: i64 = digits.parse().ok().filter(|n| *n > 0).ok_or_else(bad)?;
    let minutes = match unit {
        "m" => n,
        "h" => n.checked_mul(60).ok_or_else(bad)?,
        "d" => n.checked_mul(24 * 60).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if minutes > (retention.as_secs() / 60) as i64 {
        return Err(bad());
    }
    Ok((raw.to_owned(), minutes))
}

pub(crate) fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes()).into_owned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        let week = Duration::from_secs(7 * 24 * 3600);
        assert_eq!(window(Some("5m"), "1h", week).unwrap().1, 5);
        assert_eq!(window(None, "1h", week).unwrap().1, 60);
        assert_eq!(window(Some("7d"), "1h", week).unwrap().1, 7 * 24 * 60);
        for bad in ["8d", "0m", "30s", "m", "5", "-5m", "99999999999999999999d", "5 m"] {
            let e = window(Some(bad), "1h", week).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("window"), "{bad}");
        }
    }
}
