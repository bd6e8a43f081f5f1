//! Go's `time.Duration` text form: `ParseDuration` and `Duration.String`,
//! which yaml.v3 uses to write durations (`168h0m0s`).

/// Nanoseconds from Go duration syntax (`1h30m`, `1.5s`, `300ms`, `0`).
pub fn parse(s: &str) -> Option<i128> {
    let (neg, mut rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let num = &rest[..num_len];
        if num.is_empty() || num == "." {
            return None;
        }
        let value: f64 = num.parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale: f64 = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += value * scale;
    }
    if total > i64::MAX as f64 {
        return None;
    }
    let ns = total.round() as i128;
    Some(if neg { -ns } else { ns })
}

/// Go's `Duration.String()`.
pub fn format(ns: i128) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let neg = ns < 0;
    let u = ns.unsigned_abs();
    let mut out = String::new();
    if u < 1_000_000_000 {
        let (div, unit) = if u < 1_000 {
            (1u128, "ns")
        } else if u < 1_000_000 {
            (1_000, "µs")
        } else {
            (1_000_000, "ms")
        };
        out.push_str(&frac(u, div));
        out.push_str(unit);
    } else {
        let secs = u / 1_000_000_000;
        let sub = u % 1_000_000_000;
        let mins = secs / 60;
        let hours = mins / 60;
        if hours > 0 {
            out.push_str(&format!("{hours}h"));
        }
        if mins > 0 {
            out.push_str(&format!("{}m", mins % 60));
        }
        out.push_str(&frac((secs % 60) * 1_000_000_000 + sub, 1_000_000_000));
        out.push('s');
    }
    if neg { format!("-{out}") } else { out }
}

/// `v / div` with the fraction's trailing zeros dropped.
fn frac(v: u128, div: u128) -> String {
    let whole = v / div;
    let rem = v % div;
    if rem == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let f = format!("{rem:0width$}");
    format!("{whole}.{}", f.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for (input, want) in [
            ("168h", "168h0m0s"),
            ("1m30s", "1m30s"),
            ("90s", "1m30s"),
            ("1.5s", "1.5s"),
            ("300ms", "300ms"),
            ("1h0m0.5s", "1h0m0.5s"),
            ("0", "0s"),
            ("2µs", "2µs"),
            ("1500ns", "1.5µs"),
        ] {
            assert_eq!(format(parse(input).unwrap()), want, "{input}");
        }
        for bad in ["", "1", "1x", "h", "1.2.3s"] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
