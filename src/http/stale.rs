//! `Warning: 110 - "stale"` (RFC 7234 5.5.1): on every stored answer given
//! because the upstream failed (a tag's manifest, a tag list or referrers
//! index past `--tag-revalidate`, a factory document past
//! `--metadata-ttl`), never on a fresh one, so a client or an operator can
//! tell them apart. Each is counted in `/metrics`
//! (`talos_gen_stale_answers_total{kind}`) where the core serves it.

use axum::http::{HeaderMap, HeaderValue, header};

/// The header's value.
pub const STALE: &str = "110 - \"stale\"";

/// Mark `h` stale when `stale`.
pub fn mark(h: &mut HeaderMap, stale: bool) {
    if stale {
        h.insert(header::WARNING, HeaderValue::from_static(STALE));
    }
}
