//! Gray release: whether a device is inside the rollout of a host.
//!
//! ```text
//! bucket  = u64::from_be_bytes(sha256(host + "." + deviceId)[0..8]) % 10000
//! enabled = bucket < round(rate * 10000)
//! ```
//!
//! `host` is the canonical host string as served in the document. The rule is written out in
//! `docs/config-center.md` with test vectors, so that any client computes the same answer: a
//! device is in or out on the server and on every client alike, and raising `rate` only ever
//! adds devices (the bucket does not depend on the rate).

use sha2::{Digest, Sha256};

/// Buckets per rollout: a rate has a resolution of 0.01%.
pub const BUCKETS: u64 = 10_000;

/// The device's bucket for `host`, in `0..10000`.
pub fn bucket(host: &str, device_id: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(host.as_bytes());
    h.update(b".");
    h.update(device_id.as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) % BUCKETS
}

/// The rate as a number of buckets, `round(rate * 10000)`.
pub fn threshold(rate: f64) -> u64 {
    (rate.clamp(0.0, 1.0) * BUCKETS as f64).round() as u64
}

/// Whether `device_id` is inside the rollout of `host` at `rate`.
pub fn enabled(host: &str, device_id: &str, rate: f64) -> bool {
    bucket(host, device_id) < threshold(rate)
}

/// The key the global switch (`convergenceRate`) is bucketed under, in place of a host:
/// `sha256("convergenceRate." + deviceId)`. Hosts are canonical lowercase, so no host can
/// share it, and the switch's bucket is independent of every per-host bucket: a device in a
/// host's rollout is not therefore more or less likely to be inside the switch.
pub const CONVERGENCE_KEY: &str = "convergenceRate";

/// Whether `device_id` is inside the global switch of the convergence feature at `rate`.
pub fn convergence_enabled(device_id: &str, rate: f64) -> bool {
    enabled(CONVERGENCE_KEY, device_id, rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of `docs/config-center.md`, computed independently with Python's hashlib:
    /// `int.from_bytes(hashlib.sha256(f"{host}.{dev}".encode()).digest()[:8], "big") % 10000`.
    pub(crate) const VECTORS: [(&str, &str, u64); 12] = [
        ("cdn.xxx.com", "device-0001", 4396),
        ("cdn.xxx.com", "device-0002", 5834),
        ("cdn-ss.xxx.com", "device-0001", 3502),
        ("cdn-bak.xxx.com", "device-0001", 7023),
        ("image.xxx.com", "a1b2c3d4e5f6", 9171),
        ("product.xxx.com", "a1b2c3d4e5f6", 6936),
        ("community.xxx.com", "a1b2c3d4e5f6", 1618),
        ("product.xxx.com", "00000000-0000-0000-0000-000000000000", 9327),
        ("127.0.0.1:9000", "device-0001", 3670),
        ("image.xxx.com", "", 6938),
        ("image.xxx.com", "设备-42", 9525),
        ("community.xxx.com", "ffffffff", 6207),
    ];

    /// `convergenceRate` buckets of `docs/config-center.md`, from Python's hashlib:
    /// `int.from_bytes(hashlib.sha256(f"convergenceRate.{dev}".encode()).digest()[:8], "big") % 10000`.
    pub(crate) const SWITCH_VECTORS: [(&str, u64); 4] =
        [("device-0001", 1077), ("device-0002", 3703), ("a1b2c3d4e5f6", 2085), ("设备-42", 171)];

    #[test]
    fn switch_vectors() {
        for (dev, expect) in SWITCH_VECTORS {
            assert_eq!(bucket(CONVERGENCE_KEY, dev), expect, "{dev}");
        }
    }

    #[test]
    fn documented_vectors() {
        for (host, dev, expect) in VECTORS {
            assert_eq!(bucket(host, dev), expect, "{host} {dev}");
        }
    }

    #[test]
    fn thresholds() {
        assert_eq!(threshold(1.0), 10_000);
        assert_eq!(threshold(0.0), 0);
        assert_eq!(threshold(0.5), 5_000);
        assert_eq!(threshold(0.12345), 1_235);
        assert!(enabled("image.xxx.com", "x", 1.0));
        assert!(!enabled("image.xxx.com", "x", 0.0));
    }

    proptest::proptest! {
        #[test]
        fn raising_the_rate_only_adds_devices(host in "[a-z]{1,10}\\.com", dev in ".{0,40}", a in 0.0..=1.0f64, b in 0.0..=1.0f64) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            if enabled(&host, &dev, lo) {
                proptest::prop_assert!(enabled(&host, &dev, hi));
            }
        }
    }
}
