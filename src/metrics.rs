//! Counters and histograms, kept in one place, exported as Prometheus text.
//!
//! One [`Metrics`] (cheap to clone) lives in the service state; the store
//! users record through its methods, and `GET /metrics` renders
//! [`Metrics::render`]. Labels: `kind` is the object family (`image`,
//! `manifest`, `blob`, ...), `result` is `ok` or `error`. Every family has
//! a sample from start: per-kind ones for [`KINDS`], the per-route ones
//! for every route of the router ([`Metrics::declare_route`]).
//!
//! ```
//! let m = talos_gen::metrics::Metrics::new();
//! m.hit("image");
//! m.served("image", 1024);
//! assert!(m.render().contains("talos_gen_cache_hits_total{kind=\"image\"} 1"));
//! ```

use std::borrow::Cow;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A label value: borrowed for the values known in advance (kinds, route
/// templates, status codes), so counting a request allocates nothing.
type Label = Cow<'static, str>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindResult {
    kind: Label,
    result: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    route: Label,
    status: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    route: Label,
}

struct Inner {
    registry: Registry,
    requests: Family<RouteStatus, Counter>,
    request_seconds: Family<Route, Histogram>,
    fills_in_flight: Gauge,
    fills_waiting: Gauge,
    store_objects: Gauge,
    store_keys: Gauge,
    mirror_pins: Gauge,
    auth_failures: Counter,
    store_corrupt: Counter,
    store_orphans_swept: Counter,
    store_orphan_bytes_swept: Counter,
    store_multipart_aborted: Counter,
    hits: Family<Kind, Counter>,
    misses: Family<Kind, Counter>,
    bytes_served: Family<Kind, Counter>,
    fetches: Family<KindResult, Counter>,
    fetch_seconds: Family<Kind, Histogram>,
    responses: Family<KindResult, Counter>,
    store_bytes: Gauge,
    offline_misses: Family<Kind, Counter>,
    stale_answers: Family<Kind, Counter>,
    /// The last errors (5xx answers, failed fills), newest last.
    errors: std::sync::Mutex<std::collections::VecDeque<(std::time::SystemTime, String)>>,
    /// The last offline misses (store-only 404s), by path, newest last.
    missed: std::sync::Mutex<std::collections::VecDeque<(std::time::SystemTime, String)>>,
    mirror_last_run: Gauge,
    mirror_last_ok: Gauge,
    /// The route templates declared ([`Metrics::declare_route`]): their
    /// labels are borrowed, not allocated per request.
    routes: RwLock<Vec<&'static str>>,
}

/// Kinds every per-kind counter is exposed for from the start (at zero).
pub const KINDS: &[&str] = &["image", "manifest", "blob"];
/// Kinds of stored answers given because the upstream failed
/// ([`Metrics::stale`]): a tag's manifest, a tag list, a referrers index,
/// a factory document.
pub const STALE_KINDS: &[&str] = &["manifest", "tags", "referrers", "document"];
/// How many recent errors the status page keeps.
pub const RECENT_ERRORS: usize = 20;
/// How many recent offline misses (by path) the status page keeps.
pub const RECENT_MISSES: usize = 50;

/// The service's counters; cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// `v` borrowed from `known` when it is one of them, else owned.
fn label(v: &str, known: &[&'static str]) -> Label {
    match known.iter().find(|k| **k == v) {
        Some(k) => Cow::Borrowed(*k),
        None => Cow::Owned(v.to_string()),
    }
}

/// Kinds of the families (hits, fetches, responses, stale answers).
const KNOWN_KINDS: &[&str] = &[
    "image",
    "manifest",
    "blob",
    "registry",
    "tags",
    "referrers",
    "document",
];

fn kind(k: &str) -> Kind {
    Kind {
        kind: label(k, KNOWN_KINDS),
    }
}

/// A status code as a label value.
fn status_label(status: u16) -> Label {
    const CODES: &[(u16, &str)] = &[
        (200, "200"),
        (201, "201"),
        (204, "204"),
        (206, "206"),
        (304, "304"),
        (400, "400"),
        (401, "401"),
        (404, "404"),
        (413, "413"),
        (416, "416"),
        (500, "500"),
        (502, "502"),
        (503, "503"),
        (504, "504"),
    ];
    match CODES.iter().find(|(c, _)| *c == status) {
        Some((_, s)) => Cow::Borrowed(*s),
        None => Cow::Owned(status.to_string()),
    }
}

/// A status code's class as a label value (`2xx`).
fn class_label(status: u16) -> Label {
    const CLASSES: [&str; 6] = ["0xx", "1xx", "2xx", "3xx", "4xx", "5xx"];
    match CLASSES.get(usize::from(status / 100)) {
        Some(c) => Cow::Borrowed(*c),
        None => Cow::Owned(format!("{}xx", status / 100)),
    }
}

impl Inner {
    /// Every exported name with its help text: one table, in the order
    /// `/metrics` lists them. Kept whole on purpose: a row is a name, its
    /// help and its metric, and the point of the table is to read them
    /// together (cutting it would only scatter the list).
    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "http_requests",
            "HTTP requests by route template and status code",
            self.requests.clone(),
        );
        r.register(
            "http_request_duration_seconds",
            "Time to the response head, by route template",
            self.request_seconds.clone(),
        );
        r.register(
            "fills_in_flight",
            "Upstream fills running now",
            self.fills_in_flight.clone(),
        );
        r.register(
            "fills_waiting",
            "Upstream fills waiting for a slot (--max-concurrent-fills)",
            self.fills_waiting.clone(),
        );
        r.register(
            "store_objects",
            "Distinct objects (by sha256) held by the store",
            self.store_objects.clone(),
        );
        r.register(
            "store_keys",
            "Keys (artifacts, tags, manifests, blobs) in the store index",
            self.store_keys.clone(),
        );
        r.register(
            "mirror_pins",
            "Store keys pinned by the mirror job (never evicted)",
            self.mirror_pins.clone(),
        );
        r.register(
            "auth_failures",
            "Requests refused for a missing or wrong bearer token",
            self.auth_failures.clone(),
        );
        r.register(
            "store_orphans_swept",
            "Objects no key named (a commit killed before its entry) removed by the store's sweep while running",
            self.store_orphans_swept.clone(),
        );
        r.register(
            "store_orphan_bytes_swept",
            "Bytes of the objects the store's sweep removed",
            self.store_orphan_bytes_swept.clone(),
        );
        r.register(
            "store_multipart_aborted",
            "Unfinished multipart uploads (a process killed mid-upload) aborted by the store's sweep once an hour old",
            self.store_multipart_aborted.clone(),
        );
        r.register(
            "store_corrupt_objects",
            "Stored objects dropped because a read found a chunk whose bytes no longer match its checksum",
            self.store_corrupt.clone(),
        );
        r.register(
            "cache_hits",
            "Requests answered from the store",
            self.hits.clone(),
        );
        r.register(
            "cache_misses",
            "Requests that started or joined an upstream fill",
            self.misses.clone(),
        );
        r.register(
            "bytes_served",
            "Body bytes sent to clients",
            self.bytes_served.clone(),
        );
        r.register(
            "upstream_fetches",
            "Upstream fills by outcome",
            self.fetches.clone(),
        );
        r.register(
            "upstream_fetch_duration_seconds",
            "Duration of upstream fills",
            self.fetch_seconds.clone(),
        );
        r.register(
            "responses",
            "Responses by route kind and status class",
            self.responses.clone(),
        );
        r.register(
            "store_bytes",
            "Bytes held by the store",
            self.store_bytes.clone(),
        );
        r.register(
            "mirror_last_run_timestamp_seconds",
            "When the last mirror sync or import that wrote the store ended (Unix seconds; 0: none)",
            self.mirror_last_run.clone(),
        );
        r.register(
            "mirror_last_run_ok",
            "Whether the last mirror sync or import that wrote the store succeeded (1/0)",
            self.mirror_last_ok.clone(),
        );
        r.register(
            "offline_misses",
            "Requests for something not stored while --offline (404, no upstream contacted)",
            self.offline_misses.clone(),
        );
        r.register(
            "stale_answers",
            "Stored answers given because the upstream failed (sent with Warning: 110 - \"stale\")",
            self.stale_answers.clone(),
        );
    }

    /// Every counter exists from the start, at zero: per kind for
    /// [`KINDS`] (and [`STALE_KINDS`]), per status class for the two
    /// route kinds.
    fn samples_from_start(&self) {
        for k in STALE_KINDS {
            let _ = self.stale_answers.get_or_create(&kind(k));
        }
        for k in KINDS {
            let _ = self.hits.get_or_create(&kind(k));
            let _ = self.misses.get_or_create(&kind(k));
            let _ = self.offline_misses.get_or_create(&kind(k));
            let _ = self.bytes_served.get_or_create(&kind(k));
            let _ = self.fetch_seconds.get_or_create(&kind(k));
            for result in ["ok", "error"] {
                let _ = self.fetches.get_or_create(&KindResult {
                    kind: label(k, KNOWN_KINDS),
                    result: Cow::Borrowed(result),
                });
            }
        }
        for k in ["image", "registry"] {
            for class in ["2xx", "3xx", "4xx", "5xx"] {
                let _ = self.responses.get_or_create(&KindResult {
                    kind: label(k, KNOWN_KINDS),
                    result: Cow::Borrowed(class),
                });
            }
        }
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut inner = Inner {
            registry: Registry::with_prefix("talos_gen"),
            requests: Default::default(),
            request_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            fills_in_flight: Default::default(),
            fills_waiting: Default::default(),
            store_objects: Default::default(),
            store_keys: Default::default(),
            mirror_pins: Default::default(),
            auth_failures: Default::default(),
            store_corrupt: Default::default(),
            store_orphans_swept: Default::default(),
            store_orphan_bytes_swept: Default::default(),
            store_multipart_aborted: Default::default(),
            hits: Default::default(),
            misses: Default::default(),
            bytes_served: Default::default(),
            fetches: Default::default(),
            fetch_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.05, 2.0, 16))
            }),
            responses: Default::default(),
            store_bytes: Default::default(),
            offline_misses: Default::default(),
            stale_answers: Default::default(),
            errors: Default::default(),
            missed: Default::default(),
            mirror_last_run: Default::default(),
            mirror_last_ok: Default::default(),
            routes: RwLock::new(Vec::new()),
        };
        inner.register();
        inner.samples_from_start();
        Metrics(Arc::new(inner))
    }

    pub fn hit(&self, k: &str) {
        self.0.hits.get_or_create(&kind(k)).inc();
    }

    pub fn miss(&self, k: &str) {
        self.0.misses.get_or_create(&kind(k)).inc();
    }

    /// Not stored, and `--offline` (or an `ns` answered from the store
    /// alone): answered 404 without any upstream (not a miss: no fill
    /// started). `path` is kept for the status page (the last
    /// [`RECENT_MISSES`]).
    pub fn offline_miss(&self, k: &str, path: &str) {
        self.0.offline_misses.get_or_create(&kind(k)).inc();
        let path: String = path.chars().take(512).collect();
        push_recent(&self.0.missed, RECENT_MISSES, path);
    }

    /// The recent offline misses `(when, path)`, newest first.
    pub fn recent_misses(&self) -> Vec<(std::time::SystemTime, String)> {
        let q = self.0.missed.lock().unwrap_or_else(|p| p.into_inner());
        q.iter().rev().cloned().collect()
    }

    /// The last mirror sync or import that wrote the store: when it ended
    /// (Unix seconds) and whether it succeeded.
    pub fn set_mirror_last_run(&self, finished: u64, ok: bool) {
        self.0
            .mirror_last_run
            .set(i64::try_from(finished).unwrap_or(i64::MAX));
        self.0.mirror_last_ok.set(i64::from(ok));
    }

    /// A stored answer of kind `k` ([`STALE_KINDS`]) given because the
    /// upstream failed.
    pub fn stale(&self, k: &str) {
        self.0.stale_answers.get_or_create(&kind(k)).inc();
    }

    /// `(kind, hits, misses, offline misses)` for the status page.
    pub fn cache_counts(&self) -> Vec<(String, u64, u64, u64)> {
        KINDS
            .iter()
            .map(|k| {
                let key = kind(k);
                (
                    k.to_string(),
                    self.0.hits.get_or_create(&key).get(),
                    self.0.misses.get_or_create(&key).get(),
                    self.0.offline_misses.get_or_create(&key).get(),
                )
            })
            .collect()
    }

    /// Remember an error for the status page (the last [`RECENT_ERRORS`]).
    pub fn record_error(&self, what: impl Into<String>) {
        push_recent(&self.0.errors, RECENT_ERRORS, what.into());
    }

    /// The recent errors, newest first.
    pub fn recent_errors(&self) -> Vec<(std::time::SystemTime, String)> {
        let q = self.0.errors.lock().unwrap_or_else(|p| p.into_inner());
        q.iter().rev().cloned().collect()
    }

    pub fn served(&self, k: &str, bytes: u64) {
        self.0.bytes_served.get_or_create(&kind(k)).inc_by(bytes);
    }

    /// One upstream fill of store key `key` ended; `failed`: why not
    /// (the message names the upstream URL), kept for the status page.
    pub fn upstream_fetch(&self, k: &str, key: &str, failed: Option<&str>, took: Duration) {
        let ok = failed.is_none();
        if let Some(why) = failed {
            self.record_error(format!(
                "{k} fill of {key} failed after {:.1}s: {why}",
                took.as_secs_f64()
            ));
        }
        let result = Cow::Borrowed(if ok { "ok" } else { "error" });
        self.0
            .fetches
            .get_or_create(&KindResult {
                kind: label(k, KNOWN_KINDS),
                result,
            })
            .inc();
        self.0
            .fetch_seconds
            .get_or_create(&kind(k))
            .observe(took.as_secs_f64());
    }

    /// One response sent (`status` as a number; recorded by class, e.g. `2xx`).
    pub fn response(&self, k: &str, status: u16) {
        self.0
            .responses
            .get_or_create(&KindResult {
                kind: label(k, KNOWN_KINDS),
                result: class_label(status),
            })
            .inc();
    }

    pub fn set_store_bytes(&self, bytes: u64) {
        self.0.store_bytes.set(bytes.min(i64::MAX as u64) as i64);
    }

    /// One HTTP request answered: `route` is the route template (bounded
    /// cardinality), `took` the time to the response head.
    pub fn request(&self, route: &str, status: u16, took: Duration) {
        let route = {
            let known = self.0.routes.read().unwrap_or_else(|p| p.into_inner());
            label(route, &known)
        };
        self.0
            .requests
            .get_or_create(&RouteStatus {
                route: route.clone(),
                status: status_label(status),
            })
            .inc();
        self.0
            .request_seconds
            .get_or_create(&Route { route })
            .observe(took.as_secs_f64());
    }

    /// Create the series of a route and status at zero, so `/metrics`
    /// lists them before the first request (the router calls this for
    /// every route it serves).
    pub fn declare_route(&self, route: &'static str, status: u16) {
        {
            let mut known = self.0.routes.write().unwrap_or_else(|p| p.into_inner());
            if !known.contains(&route) {
                known.push(route);
            }
        }
        let _ = self.0.requests.get_or_create(&RouteStatus {
            route: Cow::Borrowed(route),
            status: status_label(status),
        });
        let _ = self.0.request_seconds.get_or_create(&Route {
            route: Cow::Borrowed(route),
        });
    }

    pub fn set_fills(&self, running: usize, waiting: usize) {
        self.0.fills_in_flight.set(running as i64);
        self.0.fills_waiting.set(waiting as i64);
    }

    /// Store gauges: objects (distinct digests), keys, pinned keys.
    pub fn set_store_counts(&self, objects: usize, keys: usize, pinned: usize) {
        self.0.store_objects.set(objects as i64);
        self.0.store_keys.set(keys as i64);
        self.0.mirror_pins.set(pinned as i64);
    }

    /// The store's count of dropped corrupt objects (monotonic), as a counter.
    pub fn set_store_corrupt(&self, total: u64) {
        let now = self.0.store_corrupt.get();
        if total > now {
            self.0.store_corrupt.inc_by(total - now);
        }
    }

    /// The store's sweep totals (monotonic: objects, bytes), as counters.
    pub fn set_store_swept(&self, objects: u64, bytes: u64) {
        for (c, total) in [
            (&self.0.store_orphans_swept, objects),
            (&self.0.store_orphan_bytes_swept, bytes),
        ] {
            let now = c.get();
            if total > now {
                c.inc_by(total - now);
            }
        }
    }

    /// The store's count of aborted multipart uploads (monotonic), as a
    /// counter.
    pub fn set_store_aborted(&self, total: u64) {
        let now = self.0.store_multipart_aborted.get();
        if total > now {
            self.0.store_multipart_aborted.inc_by(total - now);
        }
    }

    pub fn auth_failure(&self) {
        self.0.auth_failures.inc();
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.0.registry);
        s
    }
}

/// Append to a bounded list of recent things (oldest dropped).
fn push_recent(
    q: &std::sync::Mutex<std::collections::VecDeque<(std::time::SystemTime, String)>>,
    cap: usize,
    what: String,
) {
    let mut q = q.lock().unwrap_or_else(|p| p.into_inner());
    if q.len() >= cap {
        q.pop_front();
    }
    q.push_back((std::time::SystemTime::now(), what));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders() {
        let m = Metrics::new();
        m.hit("image");
        m.miss("image");
        m.served("image", 10);
        m.upstream_fetch("image", "image/x", None, Duration::from_millis(200));
        m.response("image", 206);
        let t = m.render();
        assert!(
            t.contains("talos_gen_cache_hits_total{kind=\"image\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("talos_gen_bytes_served_total{kind=\"image\"} 10"),
            "{t}"
        );
        assert!(
            t.contains("talos_gen_upstream_fetches_total{kind=\"image\",result=\"ok\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("talos_gen_responses_total{kind=\"image\",result=\"2xx\"} 1"),
            "{t}"
        );
        m.request("/healthz", 200, Duration::from_millis(1));
        m.set_fills(2, 1);
        m.set_store_counts(3, 4, 1);
        let t = m.render();
        assert!(
            t.contains("talos_gen_http_requests_total{route=\"/healthz\",status=\"200\"} 1"),
            "{t}"
        );
        assert!(t.contains("talos_gen_fills_in_flight 2"), "{t}");
        assert!(t.contains("talos_gen_store_objects 3"), "{t}");
        assert!(t.contains("talos_gen_mirror_pins 1"), "{t}");
        assert!(t.ends_with("# EOF\n"));
    }

    #[test]
    fn every_counter_from_the_start() {
        let t = Metrics::new().render();
        for line in [
            "talos_gen_cache_hits_total{kind=\"blob\"} 0",
            "talos_gen_cache_misses_total{kind=\"image\"} 0",
            "talos_gen_offline_misses_total{kind=\"manifest\"} 0",
            "talos_gen_upstream_fetches_total{kind=\"image\",result=\"error\"} 0",
            "talos_gen_responses_total{kind=\"registry\",result=\"5xx\"} 0",
            "talos_gen_auth_failures_total 0",
            "talos_gen_store_multipart_aborted_total 0",
        ] {
            assert!(t.contains(line), "{line} in\n{t}");
        }
    }

    /// The store's aborted uploads, a monotonic total, as a counter.
    #[test]
    fn aborted_uploads_count() {
        let m = Metrics::new();
        m.set_store_aborted(2);
        m.set_store_aborted(2);
        let t = m.render();
        assert!(
            t.contains("talos_gen_store_multipart_aborted_total 2"),
            "{t}"
        );
    }
}
