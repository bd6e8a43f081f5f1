//! Small text grammars and formats every layer shares, written once: a
//! sha256 in hex (schematic IDs, object names, digests), and sizes and
//! durations as a person reads them (the status page, the mirror job's
//! lines and progress bars).

use std::time::Duration;

/// 64 lowercase hex digits: a sha256 as the store, the factory and OCI
/// digests write it.
pub fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `1.5 GiB`-style sizes (binary units, one decimal; bytes as a count).
pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `3d 4h`, `5m 12s`, `40s`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (days, h, m, sec) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if days > 0 {
        format!("{days}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {sec}s")
    } else {
        format!("{sec}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_grammars() {
        assert_eq!(human_size(10), "10 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(3 << 30), "3.0 GiB");
        assert_eq!(human_duration(Duration::from_secs(40)), "40s");
        assert_eq!(human_duration(Duration::from_secs(312)), "5m 12s");
        assert_eq!(
            human_duration(Duration::from_secs(3 * 86400 + 4 * 3600)),
            "3d 4h"
        );
        assert!(is_hex64(&"a".repeat(64)));
        assert!(!is_hex64(&"A".repeat(64)));
        assert!(!is_hex64(&"a".repeat(63)));
    }
}
