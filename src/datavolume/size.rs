//! The smallest storage a disk from an image may have: the raw disk's
//! uncompressed size, read from the xz index at the artifact's end
//! ([`super::xz_index`]). A golden or an import smaller than it cannot
//! hold the image; one left out is that size plus [`headroom`].

use crate::error::{Error, Result};

use super::xz_index::{self, Tail};

/// The largest tail read: an index of a few hundred blocks is a few KiB.
pub const MAX_TAIL: u64 = 4 << 20;
/// The first tail read (the footer, the index, usually the stream header
/// of a one-block stream too small to matter).
const FIRST_TAIL: u64 = 64 << 10;
const GI: u64 = 1 << 30;

/// The default storage for a raw disk of `raw` bytes: its size plus a
/// tenth (at least 256 MiB) for the filesystem the importer writes and a
/// partition table grown on first boot, rounded up to a whole GiB
/// (`4.15 GiB` -> `5Gi`).
pub fn headroom(raw: u64) -> String {
    let with = raw.saturating_add((raw / 10).max(256 << 20));
    format!("{}Gi", with.div_ceil(GI).max(1))
}

/// The bytes a Kubernetes quantity stands for (`20Gi`, `500M`, `1e9`,
/// `1.5Ti`); `None` when it is not one.
pub fn quantity_bytes(q: &str) -> Option<f64> {
    if !super::is_storage_quantity(q) {
        return None;
    }
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e => 10f64.powi(e[1..].parse::<i32>().ok()?),
    };
    Some(n * mult)
}

/// The storage to write: `asked` when it holds `raw` bytes (refused, exit
/// 1, naming both sizes, when it does not), else [`headroom`].
pub fn storage_for(asked: &str, raw: u64, what: &str) -> Result<String> {
    if asked.is_empty() {
        return Ok(headroom(raw));
    }
    let bytes = quantity_bytes(asked).ok_or_else(|| {
        Error::bad_input(format!(
            "{what}: {asked:?} is not a Kubernetes quantity of storage (e.g. 20Gi)"
        ))
    })?;
    if bytes < raw as f64 {
        return Err(Error::refused(format!(
            "{what}: {asked} ({bytes:.0} bytes) is smaller than the raw disk inside the image, {raw} bytes ({:.2} GiB); give at least {}",
            raw as f64 / GI as f64,
            headroom(raw)
        )));
    }
    Ok(asked.to_string())
}

/// Read the raw disk's size from `url` (an `.xz` artifact) with ranged
/// GETs of its tail, every wait bounded by `timeout`; a server that does
/// not answer ranges, or a tail that is not an xz index, is refused (exit
/// 1) naming the URL.
pub async fn fetch_raw_size(url: &str, timeout: std::time::Duration) -> Result<u64> {
    use crate::upstream::{Limits, Upstream, UpstreamConfig};
    let fail = |why: String| {
        let why = why
            .replace(&format!("upstream {url}: "), "")
            .replace(&format!(" for url ({url})"), "");
        Error::Upstream(format!("reading the raw disk's size from {url}: {why}"))
    };
    let up = Upstream::new(UpstreamConfig {
        limits: Limits {
            timeout,
            min_rate: 0,
        },
        ..UpstreamConfig::default()
    })?;
    let mut want = FIRST_TAIL;
    loop {
        let range = format!("bytes=-{want}");
        let resp = up
            .get(url, &[("range", range.as_str())])
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status();
        if status != reqwest::StatusCode::PARTIAL_CONTENT {
            return Err(fail(format!(
                "answered {status} to a ranged read (Range: {range}), not 206"
            )));
        }
        let total = resp
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit('/').next())
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| fail("its 206 has no Content-Range with a length".into()))?;
        let tail = up
            .limits()
            .read_small(url, resp, want as usize)
            .await
            .map_err(|e| fail(e.to_string()))?;
        match xz_index::uncompressed_size(&tail, total).map_err(|e| fail(e.to_string()))? {
            Tail::Size(s) => return Ok(s),
            Tail::NeedMore(n) if n <= MAX_TAIL && n > want => want = n,
            Tail::NeedMore(n) => {
                return Err(fail(format!(
                    "its xz index needs the last {n} bytes, more than the {MAX_TAIL} read at most"
                )));
            }
        }
    }
}

/// The raw disk's size of a stored `.xz` artifact, from its tail (the
/// store's checked reads, at most [`MAX_TAIL`] bytes held); `reopen`
/// opens it again when the index needs more of the tail than the first
/// read took. `what` names the artifact in messages.
pub async fn stored_raw_size<F, Fut>(
    first: crate::store::StoredObject,
    mut reopen: F,
    what: &str,
) -> Result<u64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<crate::store::StoredObject>>,
{
    use futures::StreamExt;
    let fail =
        |why: String| Error::Upstream(format!("reading the raw disk's size of {what}: {why}"));
    let mut obj = Some(first);
    let mut want = FIRST_TAIL;
    loop {
        let o = match obj.take() {
            Some(o) => o,
            None => reopen().await?,
        };
        let total = o.len();
        let start = total.saturating_sub(want);
        let mut tail = Vec::with_capacity((total - start) as usize);
        let mut s = std::pin::pin!(o.stream(start, total));
        while let Some(b) = s.next().await {
            tail.extend_from_slice(&b.map_err(|e| fail(e.to_string()))?);
        }
        match xz_index::uncompressed_size(&tail, total).map_err(|e| fail(e.to_string()))? {
            Tail::Size(n) => return Ok(n),
            Tail::NeedMore(n) if n <= MAX_TAIL && n > want => want = n,
            Tail::NeedMore(n) => {
                return Err(fail(format!(
                    "its xz index needs the last {n} bytes, more than the {MAX_TAIL} read at most"
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_headroom() {
        let gi = GI as f64;
        assert_eq!(quantity_bytes("20Gi"), Some(20.0 * gi));
        assert_eq!(quantity_bytes("500M"), Some(5e8));
        assert_eq!(quantity_bytes("1e9"), Some(1e9));
        assert_eq!(quantity_bytes("1.5Ti"), Some(1.5 * 1024.0 * gi));
        assert_eq!(quantity_bytes("20GB"), None);
        // The v1.13.x openstack raw the chart names: ~4.15 GiB.
        let raw = (4.15 * gi) as u64;
        assert_eq!(headroom(raw), "5Gi");
        assert_eq!(headroom(1), "1Gi");
        assert_eq!(headroom(GI), "2Gi");
        assert_eq!(storage_for("", raw, "--size").unwrap(), "5Gi");
        assert_eq!(storage_for("6Gi", raw, "--size").unwrap(), "6Gi");
        let e = storage_for("4Gi", raw, "--size").unwrap_err();
        assert_eq!(e.exit_code(), 1);
        let m = e.to_string();
        assert!(
            m == format!(
                "--size: 4Gi (4294967296 bytes) is smaller than the raw disk inside the image, {raw} bytes (4.15 GiB); give at least 5Gi"
            ),
            "{m}"
        );
    }
}
