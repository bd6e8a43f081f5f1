//! Quantities as the Cozystack chart reads them (Helm/sprig float
//! arithmetic, reproduced exactly so the numbers agree with the chart).

/// The chart's memory quantity pattern
/// `^[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$`.
pub fn is_memory(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let st = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > st
    };
    if !digits(&mut i) {
        return false;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        // An `E` alone is the exa suffix.
        let save = i;
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if !digits(&mut i) {
            i = save;
        }
    }
    let rest = &s[i..];
    matches!(
        rest,
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "k" | "M" | "G" | "T" | "P" | "E"
    )
}

/// The chart's CPU pattern `^([0-9]+m|[0-9]+(\.[0-9]+)?)$`.
pub fn is_cpu(s: &str) -> bool {
    if let Some(m) = s.strip_suffix('m') {
        return !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit());
    }
    is_decimal(s)
}

/// `[0-9]+(\.[0-9]+)?`
pub fn is_decimal(s: &str) -> bool {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    match s.split_once('.') {
        Some((a, b)) => digits(a) && digits(b),
        None => digits(s),
    }
}

/// Go's `strconv.ParseFloat` for the decimal forms the chart meets; `None`
/// where sprig's `float64` would silently give 0.
fn go_float(s: &str) -> Option<f64> {
    if s.is_empty()
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    s.parse::<f64>().ok()
}

/// `cozy-lib.resources.toFloat`: bytes from a quantity. The suffixes are
/// tried in Go-template dict order (sorted keys), the last one matching
/// wins; an unparsable number is 0, as sprig's `float64` gives.
pub fn to_float(s: &str) -> f64 {
    const UNITS: &[(&str, f64)] = &[
        ("E", 1e18),
        ("Ei", 1152921504606846976.0),
        ("G", 1e9),
        ("Gi", 1073741824.0),
        ("Ki", 1024.0),
        ("M", 1e6),
        ("Mi", 1048576.0),
        ("P", 1e15),
        ("Pi", 1125899906842624.0),
        ("T", 1e12),
        ("Ti", 1099511627776.0),
        ("k", 1e3),
        ("m", 1e-3),
        ("n", 1e-9),
        ("u", 1e-6),
    ];
    let mut value = s;
    let mut unit = 1.0;
    for (suffix, mult) in UNITS {
        if let Some(v) = s.strip_suffix(suffix) {
            value = v;
            unit = *mult;
        }
    }
    go_float(value).unwrap_or(0.0) * unit
}

/// `kubernetes.cpuToMillicores` as a float (`| float64`).
pub fn cpu_millis_f(s: &str) -> f64 {
    match s.strip_suffix('m') {
        Some(m) => go_float(m).unwrap_or(0.0),
        None => go_float(s).unwrap_or(0.0) * 1000.0,
    }
}

/// `kubernetes.cpuToMillicores ... | int`: the template prints the float
/// with Go's `%v` and sprig's `int` parses that text as an integer, so a
/// fractional result (or one printed with an exponent) becomes 0.
pub fn cpu_millis_int(s: &str) -> i64 {
    let text = match s.strip_suffix('m') {
        Some(m) => m.to_string(),
        None => go_g(go_float(s).unwrap_or(0.0) * 1000.0),
    };
    text.parse::<i64>().unwrap_or(0)
}

/// Go's `%v` of a float64: the shortest form, in `%e` style when the
/// exponent is below -4 or at least 6 (`1e+06`).
pub fn go_g(f: f64) -> String {
    if f == 0.0 {
        return "0".into();
    }
    let exp = f.abs().log10().floor() as i32;
    if (-4..6).contains(&exp) {
        let s = format!("{f}");
        s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
    } else {
        let s = format!("{f:e}");
        // Rust `1e6` -> Go `1e+06`
        match s.split_once('e') {
            Some((m, e)) => {
                let (sign, digits) = match e.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', e),
                };
                format!("{m}e{sign}{digits:0>2}")
            }
            None => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        for ok in ["4Gi", "256Mi", "1e9", "500e6", "1.5Gi", "100", "2E", "3k"] {
            assert!(is_memory(ok), "{ok}");
        }
        for bad in ["4GB", "-1Gi", "1.Gi", "Gi", "", "1 Gi", "10%", "1e"] {
            assert!(!is_memory(bad), "{bad}");
        }
        for ok in ["100m", "0.5", "1", "16"] {
            assert!(is_cpu(ok), "{ok}");
        }
        for bad in ["1.5m", "m", "", "-1", "1.", "1c"] {
            assert!(!is_cpu(bad), "{bad}");
        }
    }

    #[test]
    fn arithmetic() {
        assert_eq!(to_float("4Gi"), 4294967296.0);
        assert_eq!(to_float("500m"), 0.5);
        assert_eq!(to_float("1e9"), 1e9);
        assert_eq!(to_float("junk"), 0.0);
        assert_eq!(cpu_millis_int("1"), 1000);
        assert_eq!(cpu_millis_int("250m"), 250);
        assert_eq!(cpu_millis_int("1.5"), 1500);
        assert_eq!(cpu_millis_f("0.1"), 100.0);
        assert_eq!(go_g(1000.0), "1000");
        assert_eq!(go_g(1e6), "1e+06");
        assert_eq!(cpu_millis_int("1000"), 0);
    }
}
