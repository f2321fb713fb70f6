//! `format,auto` in `x-oss-process`: the output format chosen from the client's `Accept`, as
//! CDNs' automatic WebP does. A client that accepts `image/webp` gets WebP; any other keeps the
//! original's format. Responses of such a request carry `Vary: Accept`, and the two answers are
//! two stored variants (the resolved chain is the key), so a shared cache in front never gives
//! WebP to a client that did not ask for it.

/// Whether an `Accept` value lists `image/webp` with a non-zero quality (`*/*` does not count:
/// clients that decode WebP say so).
pub(crate) fn accepts_webp(accept: &str) -> bool {
    accept.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        media.eq_ignore_ascii_case("image/webp")
            && !parts.any(|p| {
                p.strip_prefix("q=").is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
            })
    })
}

/// The chain with `format,auto` resolved: `format,webp` when the client accepts WebP, else the
/// step dropped (the original's format). `None` when the chain has no `format,auto`. The chain
/// may then be `image` alone: no processing.
pub(crate) fn resolve(process: &str, webp: bool) -> Option<String> {
    let steps: Vec<&str> = process.split('/').collect();
    if !steps.iter().skip(1).any(|s| s.eq_ignore_ascii_case("format,auto")) {
        return None;
    }
    let kept: Vec<&str> = steps
        .into_iter()
        .enumerate()
        .filter_map(|(i, s)| match (i, s.eq_ignore_ascii_case("format,auto")) {
            (0, _) | (_, false) => Some(s),
            (_, true) if webp => Some("format,webp"),
            (_, true) => None,
        })
        .collect();
    Some(kept.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_lists() {
        assert!(accepts_webp("image/avif,image/webp,image/apng,*/*;q=0.8"));
        assert!(accepts_webp("image/webp;q=0.5"));
        assert!(!accepts_webp("image/webp;q=0"));
        assert!(!accepts_webp("*/*"));
        assert!(!accepts_webp("image/png,image/*"));
    }

    #[test]
    fn chains_resolve() {
        assert_eq!(
            resolve("image/resize,w_10/format,auto", true).as_deref(),
            Some("image/resize,w_10/format,webp")
        );
        assert_eq!(
            resolve("image/resize,w_10/format,auto/quality,q_80", false).as_deref(),
            Some("image/resize,w_10/quality,q_80")
        );
        assert_eq!(resolve("image/format,auto", false).as_deref(), Some("image"));
        assert_eq!(resolve("image/resize,w_10", true), None);
    }
}
