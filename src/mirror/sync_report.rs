//! What a `mirror sync` did, item by item: the reports, their lines and
//! the closing summary, whole or after a stop ([`super::sync`] fills them).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::config::Config;
use crate::text::{count, human_size as human};

/// What happened to one item.
#[derive(Debug, Clone, Default)]
pub struct ItemReport {
    pub name: String,
    /// Objects fetched from the upstream in this run.
    pub fetched: usize,
    pub fetched_bytes: u64,
    /// Objects that were already stored.
    pub stored: usize,
    pub stored_bytes: u64,
    pub error: Option<String>,
    /// Not a failure, but worth a line (a factory document the factory
    /// does not offer: 404).
    pub note: Option<String>,
    pub elapsed: Duration,
}

/// The outcome of a sync.
#[derive(Debug, Clone, Default)]
pub struct SyncReport {
    pub items: Vec<ItemReport>,
    /// The factory's keys and lists for the config's Talos releases
    /// (`/versions`, the signing key and certificate, the official
    /// extensions and overlays of each release).
    pub factory: Vec<ItemReport>,
    pub elapsed: Duration,
    /// Stopped before its end ([`super::sync::sync_until`]): the items it did not
    /// store are in `items` and `factory` with an `interrupted` error.
    pub interrupted: bool,
}

/// The error of an item a stopped sync did not store.
const INTERRUPTED: &str = "interrupted";

impl SyncReport {
    /// Failed items and factory documents.
    pub fn failed(&self) -> Vec<&ItemReport> {
        self.items
            .iter()
            .chain(&self.factory)
            .filter(|i| i.error.is_some())
            .collect()
    }

    /// The closing summary line.
    pub fn summary(&self) -> String {
        let failed = |v: &[ItemReport]| v.iter().filter(|i| i.error.is_some()).count();
        let ok = self.items.len() - failed(&self.items);
        let all = || self.items.iter().chain(&self.factory);
        let fetched: usize = all().map(|i| i.fetched).sum();
        let fbytes: u64 = all().map(|i| i.fetched_bytes).sum();
        let stored: usize = all().map(|i| i.stored).sum();
        let sbytes: u64 = all().map(|i| i.stored_bytes).sum();
        let docs = if self.factory.is_empty() {
            String::new()
        } else {
            let noted = self.factory.iter().filter(|i| i.note.is_some()).count();
            let bad = failed(&self.factory);
            format!(
                " factory documents: {} kept, {noted} not offered (404), {bad} failed;",
                self.factory.len() - noted - bad
            )
        };
        format!(
            "mirror sync: {}, {ok} ok, {} failed;{docs} fetched {} ({}), {stored} found stored ({}); {:.1}s",
            count(self.items.len() as u64, "item", "items"),
            failed(&self.items),
            count(fetched as u64, "object", "objects"),
            human(fbytes),
            human(sbytes),
            self.elapsed.as_secs_f64()
        )
    }
}

impl SyncReport {
    /// The one line of a stopped sync (after `signal`): what was stored
    /// and what was not (in flight: how far it got, discarded; or not
    /// started), and what failed.
    pub fn interrupted_summary(&self, signal: &str) -> String {
        let all = || self.items.iter().chain(&self.factory);
        let stored: Vec<&str> = all()
            .filter(|i| i.error.is_none() && i.note.is_none())
            .map(|i| i.name.as_str())
            .collect();
        let not: Vec<String> = all()
            .filter_map(|i| match &i.error {
                Some(e) if e.starts_with(INTERRUPTED) => Some(format!(
                    "{} ({})",
                    i.name,
                    e.trim_start_matches(INTERRUPTED).trim_start_matches(": ")
                )),
                _ => None,
            })
            .collect();
        let failed: Vec<&str> = all()
            .filter(|i| {
                i.error
                    .as_deref()
                    .is_some_and(|e| !e.starts_with(INTERRUPTED))
            })
            .map(|i| i.name.as_str())
            .collect();
        let list = |v: &[&str]| {
            if v.is_empty() {
                String::new()
            } else {
                format!(": {}", v.join(", "))
            }
        };
        let fetched: u64 = all().map(|i| i.fetched_bytes).sum();
        let not_list = if not.is_empty() {
            String::new()
        } else {
            format!(": {}", not.join(", "))
        };
        let failed_list = if failed.is_empty() {
            String::new()
        } else {
            format!("; failed {}{}", failed.len(), list(&failed))
        };
        format!(
            "mirror sync: interrupted by {signal} after {:.1}s; stored {} of {}{} ({} fetched); NOT stored {}{not_list}{failed_list}",
            self.elapsed.as_secs_f64(),
            stored.len(),
            self.items.len() + self.factory.len(),
            list(&stored),
            human(fetched),
            not.len(),
        )
    }
}

/// An item a stopped sync did not store: `why` says how far it got.
pub(super) fn not_stored(name: String, why: String) -> ItemReport {
    ItemReport {
        name,
        error: Some(format!("{INTERRUPTED}: {why}")),
        ..Default::default()
    }
}

/// Counters of one item, shared by its concurrent parts.
#[derive(Default)]
pub(super) struct Counts {
    fetched: AtomicUsize,
    fetched_bytes: AtomicU64,
    stored: AtomicUsize,
    stored_bytes: AtomicU64,
}

impl Counts {
    /// The report of an item that ended with these counts.
    pub(super) fn report(
        &self,
        name: String,
        error: Option<String>,
        elapsed: Duration,
    ) -> ItemReport {
        ItemReport {
            name,
            fetched: self.fetched.load(Ordering::Relaxed),
            fetched_bytes: self.fetched_bytes.load(Ordering::Relaxed),
            stored: self.stored.load(Ordering::Relaxed),
            stored_bytes: self.stored_bytes.load(Ordering::Relaxed),
            error,
            elapsed,
            ..Default::default()
        }
    }

    /// One object of `size` bytes was already in the store.
    pub(super) fn stored(&self, size: u64) {
        self.stored.fetch_add(1, Ordering::Relaxed);
        self.stored_bytes.fetch_add(size, Ordering::Relaxed);
    }

    /// One object of `size` bytes was fetched.
    pub(super) fn fetched(&self, size: u64) {
        self.fetched.fetch_add(1, Ordering::Relaxed);
        self.fetched_bytes.fetch_add(size, Ordering::Relaxed);
    }
}

/// The report of a sync stopped before its items started.
pub(super) fn none_started(cfg: &Config, mut items: Vec<ItemReport>, t0: Instant) -> SyncReport {
    items.extend(
        cfg.items()
            .iter()
            .map(|i| not_stored(i.name(), "not started".into())),
    );
    SyncReport {
        items,
        elapsed: t0.elapsed(),
        interrupted: true,
        ..Default::default()
    }
}

/// The report of a sync stopped while its items ran: each item not done
/// said as far as it got (`flying`: those in flight), no factory document.
pub(super) fn interrupted_report(
    cfg: &Config,
    names: &[String],
    mut reports: Vec<ItemReport>,
    flying: &[super::progress::InFlight],
    t0: Instant,
) -> SyncReport {
    for n in names {
        if reports.iter().any(|r| r.name == *n) {
            continue;
        }
        let why = match flying.iter().find(|f| f.name == *n) {
            Some(f) => format!(
                "{} of {} fetched, discarded",
                human(f.done),
                f.len.map(human).unwrap_or_else(|| "?".into())
            ),
            None => "not started".into(),
        };
        reports.push(not_stored(n.clone(), why));
    }
    let factory = cfg
        .factory_docs()
        .iter()
        .map(|d| not_stored(format!("factory {}", d.path), "not started".into()))
        .collect();
    SyncReport {
        items: reports,
        factory,
        elapsed: t0.elapsed(),
        interrupted: true,
    }
}

/// The log line of one finished item.
pub(super) fn line(r: &ItemReport) -> String {
    if let Some(n) = &r.note {
        return format!("note   {}: {n}", r.name);
    }
    match &r.error {
        Some(e) => format!("FAILED {}: {e}", r.name),
        None if r.fetched == 0 => format!(
            "ok     {}: already stored ({}, {})",
            r.name,
            count(r.stored as u64, "object", "objects"),
            human(r.stored_bytes)
        ),
        // Objects shared with an item done before it in this run count as
        // found stored too: said so (a first sync has nothing stored before).
        None => format!(
            "ok     {}: fetched {} ({}) in {:.1}s{}",
            r.name,
            count(r.fetched as u64, "object", "objects"),
            human(r.fetched_bytes),
            r.elapsed.as_secs_f64(),
            match r.stored {
                0 => String::new(),
                n => format!(", {n} found stored (by an earlier run or another item of this one)"),
            }
        ),
    }
}
