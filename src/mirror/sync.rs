//! `mirror sync`: fetch every item of a config into the store, through the
//! same [`ImageCache`] and [`Registry`] the service uses (one store, one
//! fill, one verification), pinning what it mirrors.
//!
//! What the sync fetches itself (disk images, talosctl, blobs, manifests,
//! tags, referrers indexes, factory documents, schematics, signatures
//! without `--cosign-key`) is committed pinned: one index write per key.
//! What `serve` stored before (cache, unpinned) is pinned: that is its one
//! write. Under `--cosign-key` a signature and the manifest it signs are
//! committed unpinned and pinned once verified, so a refused item leaves
//! nothing pinned. An item that fails half way may leave pinned manifests
//! whose blobs the next sync completes.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use indicatif::{MultiProgress, ProgressDrawTarget};
use tokio::sync::Semaphore;

use super::config::{Config, Item};
pub use super::item_error::ItemError;
use super::item_error::pin;
use super::progress::{Meter, Total};
use super::sync_report::{Counts, interrupted_report, line, none_started, not_stored};
pub use super::sync_report::{ItemReport, SyncReport};
use crate::error::Result;
use crate::factory::{ImageCache, ImageError};
use crate::fill::{FetchError, FillHandle, Joined};
use crate::registry::layout::{blob_key, manifest_key, manifest_refs, referrers_key, tag_key};
use crate::registry::{Blob, Digest, Reference, Registry, UpstreamId};
use crate::store::{Key, Store};
use crate::upstream::Upstream;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// indicatif bars (a terminal).
    Bars,
    /// One line per item on stderr.
    Lines,
    /// Nothing (library use).
    Quiet,
}

impl Output {
    /// Bars on a terminal, lines otherwise.
    pub fn auto() -> Output {
        if std::io::stderr().is_terminal() {
            Output::Bars
        } else {
            Output::Lines
        }
    }
}

/// Where to fetch from and how hard.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    pub factory_url: String,
    /// Installer registry; the factory URL when `None`.
    pub registry_url: Option<String>,
    /// `ns=URL` for `extraImages` hosts.
    pub mirror_upstreams: crate::registry::MirrorTable,
    pub concurrency: usize,
    pub output: Output,
    /// The bounds on every upstream wait.
    pub limits: crate::upstream::Limits,
}

impl SyncOptions {
    /// The service the job runs on: the composition root's config with the
    /// job's own choices.
    fn service_config(
        &self,
        store: impl Into<crate::store::Location>,
    ) -> crate::compose::ServiceConfig {
        crate::compose::ServiceConfig {
            factory_url: self.factory_url.clone(),
            registry_url: self.registry_url.clone(),
            mirror_upstreams: self.mirror_upstreams.clone(),
            // Tags are asked again every sync (a HEAD when unchanged).
            tag_revalidate: Duration::ZERO,
            limits: self.limits,
            // extraImages hosts without --mirror-upstream are reached at https://<host>.
            direct_upstreams: true,
            // Every item tries its upstream (none refused for another's failure).
            remember_outages: false,
            ..crate::compose::ServiceConfig::new(store.into())
        }
    }
}

struct Ctx {
    store: Store,
    images: ImageCache,
    registry: Registry,
    sem: Arc<Semaphore>,
    concurrency: usize,
    signatures: super::signatures::Policy,
}

/// Sync `cfg` into the store at `cache_dir`.
pub async fn sync(
    cfg: &Config,
    store: impl Into<crate::store::Location>,
    opts: &SyncOptions,
) -> Result<SyncReport> {
    sync_until(cfg, store, opts, std::future::pending()).await
}

/// [`sync`], stopped when `stop` completes (SIGINT, SIGTERM): what was
/// stored by then stays; the items in flight are left to be cancelled
/// (their fills' temp files go with their tasks, when the runtime drops
/// them) and, with those not started, reported `interrupted`
/// ([`SyncReport::interrupted_summary`]).
pub async fn sync_until(
    cfg: &Config,
    store: impl Into<crate::store::Location>,
    opts: &SyncOptions,
    stop: impl std::future::Future<Output = ()>,
) -> Result<SyncReport> {
    let t0 = Instant::now();
    tokio::pin!(stop);
    let svc = crate::compose::Service::build(&opts.service_config(store)).await?;
    let crate::compose::Service {
        store,
        upstream,
        factory_url: factory,
        schematics,
        images,
        registry,
        ..
    } = svc;
    let upstream = upstream.expect("the mirror job is never offline");
    let concurrency = opts.concurrency.max(1);
    let ctx = Arc::new(Ctx {
        store,
        images,
        registry,
        sem: Arc::new(Semaphore::new(concurrency)),
        concurrency,
        signatures: super::signatures::Policy::from_config(cfg),
    });

    let multi = MultiProgress::with_draw_target(match opts.output {
        Output::Bars => ProgressDrawTarget::stderr(),
        _ => ProgressDrawTarget::hidden(),
    });
    // Log lines (ours and tracing's) go around the bars (`progress`).
    let _registered = super::progress::Registered::new(&multi);
    let total = Total::new(&multi);
    let say = |line: String| match opts.output {
        Output::Bars | Output::Lines => super::progress::log_line(&line),
        Output::Quiet => {}
    };

    let mut reports = Vec::new();
    // Schematics given as files are taught to the factory first.
    for s in cfg.all_schematics() {
        let Some(canonical) = &s.canonical else {
            continue;
        };
        let rep = tokio::select! {
            r = teach_schematic(&upstream, &factory, &schematics, s, canonical) => r,
            _ = &mut stop => return Ok(none_started(cfg, reports, t0)),
        };
        say(match rep.error {
            None => format!(
                "ok     {}: taught to the factory and kept in the store",
                rep.name
            ),
            Some(_) => line(&rep),
        });
        reports.push(rep);
    }

    let items = cfg.items();
    let names: Vec<String> = items.iter().map(|i| i.name()).collect();
    total.bar.set_message(format!("0/{} items", items.len()));
    let done = AtomicUsize::new(0);
    let n_items = items.len();
    // Without a terminal: a line per item in flight every interval.
    let _lines = (opts.output == Output::Lines)
        .then(|| AbortOnDrop(total.report_every(super::progress::interval())));
    let mut results = futures::stream::iter(items.into_iter().map(|item| {
        let ctx = ctx.clone();
        let meter = Meter::new(&multi, &total, item.name());
        async move {
            let t = Instant::now();
            let counts = Counts::default();
            let res = meter.around(sync_item(&ctx, &item, &counts, &meter)).await;
            counts.report(item.name(), res.err().map(|e| e.to_string()), t.elapsed())
        }
    }))
    .buffer_unordered(concurrency);
    loop {
        let rep = tokio::select! {
            r = results.next() => r,
            _ = &mut stop => {
                // Where the items in flight stood; then they are dropped.
                let flying = total.in_flight();
                total.clear_in_flight();
                drop(results);
                total.bar.finish_and_clear();
                return Ok(interrupted_report(cfg, &names, reports, &flying, t0));
            }
        };
        let Some(rep) = rep else { break };
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        total.bar.set_message(format!("{n}/{n_items} items"));
        say(line(&rep));
        reports.push(rep);
    }
    // The factory's keys and lists of the config's releases, as a
    // verifying or browsing client asks for them; a 404 is noted.
    let (mut factory_reports, interrupted) =
        sync_documents(&ctx, cfg, concurrency, &mut stop, &say).await;
    factory_reports.sort_by(|a, b| a.name.cmp(&b.name));
    total.bar.finish_and_clear();
    Ok(SyncReport {
        items: reports,
        factory: factory_reports,
        elapsed: t0.elapsed(),
        interrupted,
    })
}

/// The factory documents of the config, `concurrency` at once, until `stop`;
/// whether it stopped them (those not fetched then said so).
async fn sync_documents(
    ctx: &Ctx,
    cfg: &Config,
    concurrency: usize,
    stop: &mut (impl std::future::Future<Output = ()> + Unpin),
    say: &impl Fn(String),
) -> (Vec<ItemReport>, bool) {
    let docs = cfg.factory_docs();
    let mut factory_reports = Vec::new();
    let mut results = futures::stream::iter(docs.iter().map(|d| sync_document(ctx, d)))
        .buffer_unordered(concurrency);
    let mut interrupted = false;
    loop {
        let rep = tokio::select! {
            r = results.next() => r,
            _ = &mut *stop => {
                interrupted = true;
                None
            }
        };
        let Some(rep) = rep else { break };
        say(line(&rep));
        factory_reports.push(rep);
    }
    drop(results);
    if interrupted {
        for d in &docs {
            let name = format!("factory {}", d.path);
            if !factory_reports.iter().any(|r| r.name == name) {
                factory_reports.push(not_stored(name, "not fetched".into()));
            }
        }
    }
    (factory_reports, interrupted)
}

/// Teach the factory a schematic given as a file, and keep it in the store
/// too (pinned), so `serve` can teach it to a factory that lost it, and
/// `mirror export` carries it.
async fn teach_schematic(
    upstream: &Upstream,
    factory: &str,
    schematics: &crate::known_schematics::KnownSchematics,
    s: &super::config::SchematicSource,
    canonical: &str,
) -> ItemReport {
    let t = Instant::now();
    let name = format!(
        "schematic {} ({})",
        s.id,
        s.file
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    let posted = post_schematic(upstream, factory, &s.id, canonical).await;
    let stored = match crate::schematic::Schematic::parse(canonical) {
        Ok(parsed) => schematics
            .put(&parsed, true)
            .await
            .map(drop)
            .map_err(ItemError::StoringSchematic),
        Err(e) => Err(ItemError::Schematic(e)),
    };
    let res = posted.and(stored);
    ItemReport {
        name,
        error: res.err().map(|e| e.to_string()),
        elapsed: t.elapsed(),
        ..Default::default()
    }
}

/// A task aborted when this is dropped (the progress lines' writer).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Fetch one factory document and keep it pinned; a 404 is a note.
async fn sync_document(ctx: &Ctx, doc: &crate::factory::FactoryDoc) -> ItemReport {
    let t = Instant::now();
    let mut rep = ItemReport {
        name: format!("factory {}", doc.path),
        ..Default::default()
    };
    match ctx.images.fetch_document(doc).await {
        Ok(d) => {
            let before = ctx.store.entry(&doc.store_key()).map(|e| e.digest);
            match ctx.images.keep_document(doc, &d, true).await {
                Ok(e) if before.as_deref() == Some(e.digest.as_str()) => {
                    rep.stored = 1;
                    rep.stored_bytes = e.size;
                }
                Ok(e) => {
                    rep.fetched = 1;
                    rep.fetched_bytes = e.size;
                }
                Err(e) => rep.error = Some(format!("keeping it: {e}")),
            }
        }
        Err(FetchError::Status { status: 404, .. }) if !doc.is_pxe() => {
            rep.note = Some("the factory does not offer it (404); noted, nothing kept".into());
        }
        Err(e) => rep.error = Some(e.to_string()),
    }
    rep.elapsed = t.elapsed();
    rep
}

async fn post_schematic(
    up: &Upstream,
    factory: &str,
    id: &str,
    canonical: &str,
) -> std::result::Result<(), ItemError> {
    let url = format!("{factory}/schematics");
    let failed = |why: String| ItemError::Post {
        url: url.clone(),
        why,
    };
    let resp = up
        .post(&url, "application/yaml", canonical.as_bytes().to_vec())
        .await
        .map_err(|e| failed(e.to_string()))?;
    let st = resp.status();
    let body = crate::upstream::small_body(resp, up.limits()).await;
    if !st.is_success() {
        return Err(failed(format!(
            "{st}: {}",
            crate::text::one_line(&String::from_utf8_lossy(&body))
        )));
    }
    #[derive(serde::Deserialize)]
    struct Created {
        id: String,
    }
    match serde_json::from_slice::<Created>(&body) {
        Ok(c) if c.id == id => Ok(()),
        Ok(c) => Err(failed(format!(
            "the factory gave ID {} for a schematic whose ID is {id}",
            c.id
        ))),
        Err(e) => Err(failed(format!("answer is not {{\"id\": ...}}: {e}"))),
    }
}

async fn sync_item(
    ctx: &Ctx,
    item: &Item,
    counts: &Counts,
    meter: &Meter,
) -> std::result::Result<(), ItemError> {
    match item {
        Item::Image(k) => {
            let _permit = meter.slot(&ctx.sem).await.map_err(ItemError::Stopped)?;
            let joined = ctx.images.lookup(k, true).await;
            sync_artifact(ctx, joined, &k.store_key(), counts, meter).await
        }
        Item::Talosctl(k) => {
            let _permit = meter.slot(&ctx.sem).await.map_err(ItemError::Stopped)?;
            let joined = ctx.images.lookup_talosctl(k, true).await;
            sync_artifact(ctx, joined, &k.store_key(), counts, meter).await
        }
        Item::Installer { repo, tag } => {
            let up = UpstreamId::Installer;
            sync_signed(ctx, item, &up, repo, tag, counts, meter).await
        }
        Item::Extra(x) => {
            let up = ctx
                .registry
                .upstream_for_host(&x.host)
                .map_err(ItemError::Unrouted)?;
            sync_signed(ctx, item, &up, &x.repo, &x.reference, counts, meter).await
        }
    }
}

/// An OCI item with its cosign signature, checked first (`signatures`).
async fn sync_signed(
    ctx: &Ctx,
    item: &Item,
    up: &UpstreamId,
    repo: &str,
    reference: &str,
    counts: &Counts,
    meter: &Meter,
) -> std::result::Result<(), ItemError> {
    let checked = super::signatures::before(
        &ctx.registry,
        &ctx.store,
        &ctx.signatures,
        item,
        up,
        repo,
        reference,
    )
    .await?;
    let top = sync_oci(ctx, up, repo, reference, counts, meter).await?;
    super::signatures::after(checked, &top)?;
    sync_referrers(ctx, up, repo, &top, counts, meter).await
}

/// The OCI 1.1 referrers of `top` (signatures, SBOMs, attestations
/// attached with `subject`): the index the upstream answers, or the empty
/// one when it has no referrers API, kept pinned under `referrers_key`, and
/// every manifest it lists synced (and pinned) like an item, so `serve
/// --offline` answers `/v2/<repo>/referrers/<digest>` and each referrer.
/// The key also records, for a digest-only image, that its registry is
/// held (`Registry::held_hosts`).
async fn sync_referrers(
    ctx: &Ctx,
    up: &UpstreamId,
    repo: &str,
    top: &Digest,
    counts: &Counts,
    meter: &Meter,
) -> std::result::Result<(), ItemError> {
    let (index, _) = ctx
        .registry
        .referrers_index(up, repo, top, true)
        .await
        .map_err(|e| ItemError::registry(format!("referrers of {repo}@{top}"), e))?;
    let refs = manifest_refs(&index).map_err(|cause| ItemError::Malformed {
        what: format!("referrers of {repo}@{top}"),
        cause,
    })?;
    for d in refs.manifests {
        sync_oci(ctx, up, repo, d.as_str(), counts, meter)
            .await
            .map_err(|e| e.within(format!("referrer {d} of {repo}@{top}")))?;
    }
    pin(&ctx.store, &referrers_key(up, repo, top)).await
}

/// Follow a fill to its end, moving the meter as bytes arrive.
async fn track(
    h: FillHandle,
    meter: &Meter,
) -> std::result::Result<crate::store::Entry, FetchError> {
    let watch = h.clone();
    let fut = h.wait_entry();
    tokio::pin!(fut);
    let mut seen = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            r = &mut fut => {
                if let Ok(e) = &r {
                    meter.inc(e.size.saturating_sub(seen));
                }
                return r;
            }
            _ = tick.tick() => {
                let w = watch.written();
                meter.inc(w.saturating_sub(seen));
                seen = seen.max(w);
            }
        }
    }
}

/// A disk image or talosctl binary: stored, or followed to the end of its fill; then pinned.
async fn sync_artifact(
    ctx: &Ctx,
    joined: std::result::Result<Joined, ImageError>,
    store_key: &Key,
    counts: &Counts,
    meter: &Meter,
) -> std::result::Result<(), ItemError> {
    match joined {
        Err(ImageError::NotCached(m)) => return Err(ItemError::NotCached(m)),
        Err(ImageError::Fetch(e)) => return Err(ItemError::Fetch(e)),
        Ok(Joined::Stored(o)) => {
            meter.grow(o.entry.size);
            meter.inc(o.entry.size);
            counts.stored(o.entry.size);
        }
        Ok(Joined::Filling(mut h)) => {
            let head = h.head().await.map_err(ItemError::Fetch)?;
            match head.len {
                Some(n) => meter.grow(n),
                None => meter.unknown(1),
            }
            let e = track(h, meter).await.map_err(ItemError::Fetch)?;
            if head.len.is_none() {
                meter.resolved(e.size);
            }
            counts.fetched(e.size);
        }
    }
    pin(&ctx.store, store_key).await
}

async fn sync_oci(
    ctx: &Ctx,
    up: &UpstreamId,
    repo: &str,
    reference: &str,
    counts: &Counts,
    meter: &Meter,
) -> std::result::Result<Digest, ItemError> {
    let top_ref = Reference::parse(reference).map_err(ItemError::Reference)?;
    // Manifests: the top one, then every manifest of an index (all platforms).
    let mut manifests: Vec<Digest> = Vec::new();
    let mut blobs: BTreeMap<Digest, Option<u64>> = BTreeMap::new();
    let mut queue: Vec<Reference> = vec![top_ref.clone()];
    while let Some(r) = queue.pop() {
        let before = match &r {
            Reference::Digest(d) => ctx.store.entry(&manifest_key(d)).is_some(),
            Reference::Tag(t) => ctx
                .store
                .entry(&tag_key(up, repo, t))
                .and_then(|e| Digest::from_hex(&e.digest))
                .is_some_and(|d| ctx.store.entry(&manifest_key(&d)).is_some()),
        };
        let m = ctx
            .registry
            .manifest_kept(up, repo, &r, true)
            .await
            .map_err(|e| ItemError::registry(format!("manifest {repo}:{}", ref_str(&r)), e))?;
        if manifests.contains(&m.digest) {
            continue;
        }
        if before {
            counts.stored(m.body.len() as u64);
        } else {
            counts.fetched(m.body.len() as u64);
        }
        let refs = manifest_refs(&m.body).map_err(|cause| ItemError::Malformed {
            what: format!("manifest {repo}@{}", m.digest),
            cause,
        })?;
        for d in refs.manifests {
            if !manifests.contains(&d) {
                queue.push(Reference::Digest(d));
            }
        }
        for (d, size) in refs.blobs {
            blobs.entry(d).or_insert(size);
        }
        manifests.push(m.digest);
    }
    for size in blobs.values().flatten() {
        meter.grow(*size);
    }
    // Blobs the manifests give no size for: a spinner until each is known.
    meter.unknown(blobs.values().filter(|s| s.is_none()).count());
    if blobs.is_empty() {
        meter.grow(0);
    }
    // Blobs, concurrently; every one is tried even when another failed.
    let errors: Vec<ItemError> = futures::stream::iter(blobs.iter().map(|(d, size)| async move {
        let _permit = meter.slot(&ctx.sem).await.map_err(ItemError::Stopped)?;
        match ctx.registry.blob_kept(up, repo, d, true).await {
            Ok(Blob::Stored(o)) => {
                if size.is_none() {
                    meter.resolved(o.entry.size);
                }
                meter.inc(o.entry.size);
                counts.stored(o.entry.size);
            }
            Ok(Blob::Growing(g)) => {
                if size.is_none()
                    && let Some(n) = g.head().len
                {
                    meter.resolved(n);
                }
                let e =
                    track(g.handle().clone(), meter)
                        .await
                        .map_err(|cause| ItemError::FetchOf {
                            what: format!("blob {d}"),
                            cause,
                        })?;
                if size.is_none() && g.head().len.is_none() {
                    meter.resolved(e.size);
                }
                counts.fetched(e.size);
            }
            Err(e) => return Err(ItemError::registry(format!("blob {d}"), e)),
        }
        pin(&ctx.store, &blob_key(d)).await
    }))
    .buffer_unordered(ctx.concurrency)
    .filter_map(|r| async move { r.err() })
    .collect()
    .await;
    let more = errors.len().saturating_sub(1);
    if let Some(first) = errors.into_iter().next() {
        return Err(if more > 0 {
            ItemError::Several {
                first: Box::new(first),
                more,
            }
        } else {
            first
        });
    }
    for d in &manifests {
        pin(&ctx.store, &manifest_key(d)).await?;
    }
    if let Reference::Tag(t) = &top_ref {
        pin(&ctx.store, &tag_key(up, repo, t)).await?;
    }
    manifests
        .first()
        .cloned()
        .ok_or_else(|| ItemError::NoManifest(format!("{repo}:{reference}")))
}

fn ref_str(r: &Reference) -> String {
    match r {
        Reference::Tag(t) => t.clone(),
        Reference::Digest(d) => d.as_str().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One line: what was stored, what was not (how far), what failed.
    #[test]
    fn the_interrupted_line_names_stored_and_not_stored() {
        let ok = ItemReport {
            name: "a".into(),
            fetched: 1,
            fetched_bytes: 2048,
            ..Default::default()
        };
        let bad = ItemReport {
            name: "b".into(),
            error: Some("404".into()),
            ..Default::default()
        };
        let r = SyncReport {
            items: vec![
                ok,
                bad,
                not_stored("c".into(), "1.0 KiB of 4.0 KiB fetched, discarded".into()),
            ],
            factory: vec![not_stored("factory /versions".into(), "not started".into())],
            elapsed: Duration::from_millis(1500),
            interrupted: true,
        };
        assert_eq!(
            r.interrupted_summary("SIGTERM"),
            "mirror sync: interrupted by SIGTERM after 1.5s; stored 1 of 4: a (2.0 KiB fetched); NOT stored 2: c (1.0 KiB of 4.0 KiB fetched, discarded), factory /versions (not started); failed 1: b"
        );
    }
}
