//! Cozystack's KubeVirt instance types (`spec.cpu.guest`, `spec.memory.guest`).

/// (name, vCPUs, memory)
pub fn lookup(name: &str) -> Option<(u32, String)> {
    let (series, size) = name.split_once('.')?;
    let (base, twin) = match size.strip_suffix("1gi") {
        Some(b) => (b, true),
        None => (size, false),
    };
    let gi = |n: u32| format!("{n}Gi");
    let general = |s: &str| -> Option<(u32, String)> {
        Some(match s {
            "nano" => (1, "512Mi".to_string()),
            "micro" => (1, gi(1)),
            "small" => (1, gi(2)),
            "medium" => (1, gi(4)),
            "large" => (2, gi(8)),
            "xlarge" => (4, gi(16)),
            "2xlarge" => (8, gi(32)),
            "4xlarge" => (16, gi(64)),
            "8xlarge" => (32, gi(128)),
            _ => return None,
        })
    };
    if twin && !matches!(series, "cx1" | "m1") {
        return None;
    }
    match series {
        "u1" | "d1" if base == "2xmedium" => Some((2, gi(4))),
        "u1" | "o1" | "d1" => general(base),
        "rt1" if base != "nano" => general(base),
        "cx1" => Some(match base {
            "medium" => (1, gi(2)),
            "large" => (2, gi(4)),
            "xlarge" => (4, gi(8)),
            "2xlarge" => (8, gi(16)),
            "4xlarge" => (16, gi(32)),
            "8xlarge" => (32, gi(64)),
            _ => return None,
        }),
        "m1" => Some(match base {
            "large" => (2, gi(16)),
            "xlarge" => (4, gi(32)),
            "2xlarge" => (8, gi(64)),
            "4xlarge" => (16, gi(128)),
            "8xlarge" => (32, gi(256)),
            _ => return None,
        }),
        "n1" => Some(match base {
            "medium" => (4, gi(4)),
            "large" => (4, gi(8)),
            "xlarge" => (8, gi(16)),
            "2xlarge" => (16, gi(32)),
            "4xlarge" => (32, gi(64)),
            "8xlarge" => (64, gi(128)),
            _ => return None,
        }),
        "gn1" => Some(match base {
            "xlarge" => (4, gi(16)),
            "2xlarge" => (8, gi(32)),
            "4xlarge" => (16, gi(64)),
            "8xlarge" => (32, gi(128)),
            _ => return None,
        }),
        _ => None,
    }
}

/// Every instance type name, for tests and error hints.
pub fn all() -> Vec<String> {
    let sizes = [
        "nano", "micro", "small", "medium", "2xmedium", "large", "xlarge", "2xlarge", "4xlarge",
        "8xlarge",
    ];
    let mut out = Vec::new();
    for series in ["cx1", "d1", "gn1", "m1", "n1", "o1", "rt1", "u1"] {
        for size in sizes {
            for name in [format!("{series}.{size}"), format!("{series}.{size}1gi")] {
                if lookup(&name).is_some() {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// The `n` known names closest to `name` (edit distance, then name).
pub fn nearest(name: &str, n: usize) -> Vec<String> {
    let mut all: Vec<(usize, String)> = all()
        .into_iter()
        .map(|k| (crate::text::levenshtein(name, &k, |c| c), k))
        .collect();
    all.sort();
    all.into_iter().take(n).map(|(_, k)| k).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_seed() {
        // The seed (001) lists 69 instance types.
        assert_eq!(all().len(), 69);
        assert_eq!(lookup("u1.medium"), Some((1, "4Gi".into())));
        assert_eq!(lookup("cx1.large1gi"), Some((2, "4Gi".into())));
        assert_eq!(lookup("n1.medium"), Some((4, "4Gi".into())));
        assert_eq!(lookup("u1.nano"), Some((1, "512Mi".into())));
        assert_eq!(lookup("rt1.nano"), None);
        assert_eq!(lookup("o1.2xmedium"), None);
        assert_eq!(lookup("u1.medium1gi"), None);
        assert_eq!(lookup("x9.large"), None);
        assert_eq!(nearest("u1.medum", 1), vec!["u1.medium".to_string()]);
    }
}
