//! `mirror sync`'s progress on a terminal (indicatif), and the one way log
//! lines reach stderr while bars are drawn.
//!
//! Each running item has one line, in one of four forms:
//! - a spinner with its elapsed time and bytes while its length is unknown
//!   (waiting for a response head, an OCI item before its manifests are read,
//!   an upstream without `Content-Length`): never a bar, never full;
//! - `waiting for a slot` while every part of it waits for `--concurrency`;
//! - a bar once its length is known;
//! - `stalled, no bytes for Ns` with its elapsed time (and no bar) when no
//!   byte arrived for [`STALL_AFTER`]; back to the bar when bytes come again.
//!
//! The total line is a spinner until some length is known. Log lines (the
//! items' own lines and tracing's, through [`log_writer`]) are written with
//! the bars cleared and redrawn after them ([`MultiProgress::suspend`]), so
//! a line is never broken across a bar.
//!
//! Without a terminal (a CronJob's log) no bar is drawn: every
//! [`interval`] (10 s; `TALOS_GEN_PROGRESS_INTERVAL`, seconds, for tests
//! only) one line per item in flight ([`Total::progress_lines`]: what, bytes
//! done of the total when known, the rate since its last line), besides
//! the line each item gets when it ends. `mirror import` writes the same
//! kind of line for the object it is reading ([`Ticker`]).

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::text::human_size;
use tokio::sync::{AcquireError, Semaphore, SemaphorePermit};

/// No byte for this long and an item says `stalled`.
pub const STALL_AFTER: Duration = Duration::from_secs(3);
/// How often a running item's line is redrawn (elapsed time, spinner, stall).
pub const REFRESH: Duration = Duration::from_millis(250);

/// How often a run without a terminal writes its progress lines: 10 s, or
/// `TALOS_GEN_PROGRESS_INTERVAL` (seconds, fractions allowed; meant for
/// tests, which cannot wait 10 s a line).
pub fn interval() -> Duration {
    std::env::var("TALOS_GEN_PROGRESS_INTERVAL")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.05)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs(10))
}

/// `rate` bytes per second, as a line shows it.
fn rate_text(bytes: u64, over: Duration) -> String {
    let secs = over.as_secs_f64();
    if secs <= 0.0 {
        return "-".into();
    }
    format!("{}/s", human_size((bytes as f64 / secs) as u64))
}

/// One progress line: `progress NAME: DONE of TOTAL (P%), RATE`.
pub fn progress_text(name: &str, done: u64, len: Option<u64>, rate: &str) -> String {
    match len {
        Some(n) if n > 0 => format!(
            "progress {name}: {} of {} ({}%), {rate}",
            human_size(done),
            human_size(n),
            done.saturating_mul(100) / n
        ),
        _ => format!("progress {name}: {} so far, {rate}", human_size(done)),
    }
}

/// Progress lines every [`interval`] for a loop that moves bytes itself
/// (`mirror import`): [`Ticker::due`] says when one is due, with its rate.
pub struct Ticker {
    every: Duration,
    last: Instant,
    at: u64,
}

impl Ticker {
    pub fn new() -> Ticker {
        Ticker {
            every: interval(),
            last: Instant::now(),
            at: 0,
        }
    }

    /// With `done` bytes so far: the rate since the last line, when one is due.
    pub fn due(&mut self, done: u64) -> Option<String> {
        let over = self.last.elapsed();
        if over < self.every {
            return None;
        }
        let r = rate_text(done.saturating_sub(self.at), over);
        self.last = Instant::now();
        self.at = done;
        Some(r)
    }
}

impl Default for Ticker {
    fn default() -> Ticker {
        Ticker::new()
    }
}

/// The bars of the running sync, if any: [`log_writer`] writes around them.
static BARS: Mutex<Option<MultiProgress>> = Mutex::new(None);

/// Write `bytes` to stderr whole, with the bars (if drawn) cleared first and
/// redrawn after.
pub fn log_bytes(bytes: &[u8]) {
    let bars = BARS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let write = || {
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(bytes);
        let _ = e.flush();
    };
    match bars {
        Some(m) => m.suspend(write),
        None => write(),
    }
}

/// A log line (a newline is added).
pub fn log_line(line: &str) {
    log_bytes(format!("{line}\n").as_bytes());
}

/// A writer for tracing's fmt layer (`with_writer(log_writer)`): each event
/// is buffered and written whole by [`log_bytes`] when the layer drops it.
pub fn log_writer() -> LogWriter {
    LogWriter(Vec::new())
}

pub struct LogWriter(Vec<u8>);

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        if !self.0.is_empty() {
            log_bytes(&std::mem::take(&mut self.0));
        }
        Ok(())
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// While alive, log lines go around these bars.
pub struct Registered(());

impl Registered {
    pub fn new(multi: &MultiProgress) -> Registered {
        *BARS.lock().unwrap_or_else(|p| p.into_inner()) = Some(multi.clone());
        Registered(())
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        *BARS.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .progress_chars("=> ")
        .tick_chars("|/-\\ ")
}

struct Styles {
    spinner: ProgressStyle,
    bar: ProgressStyle,
    plain: ProgressStyle,
    total_spinner: ProgressStyle,
    total_bar: ProgressStyle,
}

impl Styles {
    fn new() -> Styles {
        Styles {
            spinner: style("{prefix:>7} {elapsed:>4} {spinner} {bytes} {bytes_per_sec} {wide_msg}"),
            bar: style(
                "{prefix:>7} {elapsed:>4} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {wide_msg}",
            ),
            plain: style("{prefix:>7} {elapsed:>4} {wide_msg}"),
            total_spinner: style(
                "{prefix:>7} {elapsed:>4} {spinner} {bytes} {bytes_per_sec} {msg}",
            ),
            total_bar: style(
                "{prefix:>7} {elapsed:>4} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {msg}",
            ),
        }
    }
}

/// The total line, shared by every item.
#[derive(Clone)]
pub struct Total {
    pub bar: ProgressBar,
    sized: Arc<AtomicBool>,
    styles: Arc<Styles>,
    /// The items in flight (inside [`Meter::around`]), in start order, and
    /// where each stood at its last progress line.
    running: Arc<Mutex<Vec<(Meter, u64, Instant)>>>,
}

/// An item in flight, as the interrupted summary names it.
#[derive(Debug, Clone)]
pub struct InFlight {
    pub name: String,
    pub done: u64,
    pub len: Option<u64>,
}

impl Total {
    pub fn new(multi: &MultiProgress) -> Total {
        let styles = Arc::new(Styles::new());
        let bar = multi.add(ProgressBar::new(0));
        bar.set_style(styles.total_spinner.clone());
        bar.set_prefix("total");
        Total {
            bar,
            sized: Arc::new(AtomicBool::new(false)),
            styles,
            running: Arc::default(),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Vec<(Meter, u64, Instant)>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One line per item in flight: bytes done of its total when known,
    /// the rate since its last line (or its start), or what it waits for.
    pub fn progress_lines(&self) -> Vec<String> {
        let now = Instant::now();
        self.running()
            .iter_mut()
            .map(|(m, at, since)| {
                let done = m.item.position();
                let line = m.line(done.saturating_sub(*at), now - *since);
                (*at, *since) = (done, now);
                line
            })
            .collect()
    }

    /// Clear the bars of the items in flight (a stopped run), so no bar is
    /// left drawn after its last line.
    pub fn clear_in_flight(&self) {
        for (m, _, _) in self.running().iter() {
            m.item.finish_and_clear();
        }
    }

    /// The items in flight now.
    pub fn in_flight(&self) -> Vec<InFlight> {
        self.running()
            .iter()
            .map(|(m, _, _)| InFlight {
                name: m.s.name.clone(),
                done: m.item.position(),
                len: m.known_len(),
            })
            .collect()
    }

    /// Write [`Total::progress_lines`] every `every` until dropped (the
    /// task is aborted with the handle).
    pub fn report_every(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let t = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                for l in t.progress_lines() {
                    log_line(&l);
                }
            }
        })
    }

    fn grow(&self, n: u64) {
        self.bar.inc_length(n);
        if n > 0 && !self.sized.swap(true, Ordering::Relaxed) {
            self.bar.set_style(self.styles.total_bar.clone());
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Shown {
    Spinner = 0,
    Waiting = 1,
    Bar = 2,
    Stalled = 3,
}

struct ItemState {
    name: String,
    /// The last byte (or the start, or the last slot granted).
    last: Mutex<Instant>,
    /// Some length is known...
    sized: AtomicBool,
    /// ...and this many parts' lengths are not (yet).
    unknown: AtomicUsize,
    /// Parts waiting for a `--concurrency` slot, and parts holding one.
    queued: AtomicUsize,
    held: AtomicUsize,
    shown: AtomicU8,
}

/// The progress of one item (and its share of the total).
#[derive(Clone)]
pub struct Meter {
    pub item: ProgressBar,
    total: Total,
    s: Arc<ItemState>,
}

impl Meter {
    /// A line for `name`, above the total.
    pub fn new(multi: &MultiProgress, total: &Total, name: String) -> Meter {
        let item = multi.insert_before(&total.bar, ProgressBar::new(0));
        item.set_style(total.styles.spinner.clone());
        item.set_prefix("item");
        item.set_message(name.clone());
        Meter {
            item,
            total: total.clone(),
            s: Arc::new(ItemState {
                name,
                last: Mutex::new(Instant::now()),
                sized: AtomicBool::new(false),
                unknown: AtomicUsize::new(0),
                queued: AtomicUsize::new(0),
                held: AtomicUsize::new(0),
                shown: AtomicU8::new(Shown::Spinner as u8),
            }),
        }
    }

    /// `n` more bytes are expected (a known length).
    pub fn grow(&self, n: u64) {
        self.item.inc_length(n);
        self.s.sized.store(true, Ordering::Relaxed);
        self.total.grow(n);
    }

    /// `k` parts whose lengths are not known yet (each later [`Meter::resolved`]).
    pub fn unknown(&self, k: usize) {
        self.s.unknown.fetch_add(k, Ordering::Relaxed);
    }

    /// One part of unknown length now has one.
    pub fn resolved(&self, n: u64) {
        self.grow(n);
        let _ = self
            .s
            .unknown
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| u.checked_sub(1));
    }

    /// `n` bytes arrived (or were found stored).
    pub fn inc(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.item.inc(n);
        self.total.bar.inc(n);
        self.touch();
    }

    fn touch(&self) {
        *self.s.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// A `--concurrency` slot for one part of this item; time spent waiting
    /// for it is shown as such, never as a stall.
    pub async fn slot<'a>(&'a self, sem: &'a Semaphore) -> Result<Slot<'a>, AcquireError> {
        self.s.queued.fetch_add(1, Ordering::Relaxed);
        let permit = sem.acquire().await;
        self.s.queued.fetch_sub(1, Ordering::Relaxed);
        let permit = permit?;
        if self.s.held.fetch_add(1, Ordering::Relaxed) == 0 {
            self.touch();
        }
        Ok(Slot {
            _permit: permit,
            s: &self.s,
        })
    }

    /// Redraw: the right form for now (see the module), elapsed time, spinner.
    pub fn refresh(&self) {
        let s = &self.s;
        let quiet = s.last.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
        let held = s.held.load(Ordering::Relaxed);
        let waiting = held == 0 && s.queued.load(Ordering::Relaxed) > 0;
        let now = if waiting {
            Shown::Waiting
        } else if quiet >= STALL_AFTER {
            Shown::Stalled
        } else if s.sized.load(Ordering::Relaxed) && s.unknown.load(Ordering::Relaxed) == 0 {
            Shown::Bar
        } else {
            Shown::Spinner
        };
        let before = s.shown.swap(now as u8, Ordering::Relaxed);
        let styles = &self.total.styles;
        if before != now as u8 {
            match now {
                Shown::Spinner => self.item.set_style(styles.spinner.clone()),
                Shown::Bar => self.item.set_style(styles.bar.clone()),
                Shown::Waiting | Shown::Stalled => self.item.set_style(styles.plain.clone()),
            }
            match now {
                Shown::Spinner | Shown::Bar => self.item.set_message(s.name.clone()),
                Shown::Waiting => self
                    .item
                    .set_message(format!("waiting for a slot (--concurrency): {}", s.name)),
                Shown::Stalled => {}
            }
        }
        if now == Shown::Stalled {
            self.item.set_message(stalled_text(
                quiet,
                self.item.position(),
                (s.sized.load(Ordering::Relaxed) && s.unknown.load(Ordering::Relaxed) == 0)
                    .then(|| self.item.length())
                    .flatten(),
                &s.name,
            ));
        }
        self.item.tick();
        self.total.bar.tick();
    }

    /// The item's length, once every part's is known.
    fn known_len(&self) -> Option<u64> {
        let s = &self.s;
        (s.sized.load(Ordering::Relaxed) && s.unknown.load(Ordering::Relaxed) == 0)
            .then(|| self.item.length())
            .flatten()
    }

    /// Its progress line: `moved` bytes came in the last `over`.
    fn line(&self, moved: u64, over: Duration) -> String {
        let s = &self.s;
        let quiet = s.last.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
        if s.held.load(Ordering::Relaxed) == 0 && s.queued.load(Ordering::Relaxed) > 0 {
            return format!("progress {}: waiting for a slot (--concurrency)", s.name);
        }
        let rate = if quiet >= STALL_AFTER {
            format!("stalled, no bytes for {}s", quiet.as_secs())
        } else {
            rate_text(moved, over)
        };
        progress_text(&s.name, self.item.position(), self.known_len(), &rate)
    }

    /// Run `work`, redrawing every [`REFRESH`]; the line goes when it ends.
    /// While it runs the item is in flight ([`Total::progress_lines`]).
    pub async fn around<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        let _listed = Listed::new(self);
        tokio::pin!(work);
        let mut tick = tokio::time::interval(REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let out = loop {
            tokio::select! {
                r = &mut work => break r,
                _ = tick.tick() => self.refresh(),
            }
        };
        self.item.finish_and_clear();
        out
    }
}

/// An item listed in flight while alive (also when its work is dropped).
struct Listed {
    total: Total,
    s: Arc<ItemState>,
}

impl Listed {
    fn new(m: &Meter) -> Listed {
        m.total
            .running()
            .push((m.clone(), m.item.position(), Instant::now()));
        Listed {
            total: m.total.clone(),
            s: m.s.clone(),
        }
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.total
            .running()
            .retain(|(m, _, _)| !Arc::ptr_eq(&m.s, &self.s));
    }
}

/// The text of a stalled item's line (after its elapsed time).
fn stalled_text(quiet: Duration, pos: u64, len: Option<u64>, name: &str) -> String {
    let of = match len {
        Some(n) => format!("{} of {}", human_size(pos), human_size(n)),
        None => format!("{} so far", human_size(pos)),
    };
    format!("stalled, no bytes for {}s, {of}: {name}", quiet.as_secs())
}

/// A held `--concurrency` slot of one item's part.
pub struct Slot<'a> {
    _permit: SemaphorePermit<'a>,
    s: &'a ItemState,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.s.held.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalled_text_says_so_without_a_bar() {
        let t = stalled_text(Duration::from_millis(4200), 512, Some(1024), "x");
        assert_eq!(t, "stalled, no bytes for 4s, 512 B of 1.0 KiB: x");
        let t = stalled_text(Duration::from_secs(3), 0, None, "y");
        assert_eq!(t, "stalled, no bytes for 3s, 0 B so far: y");
    }

    #[test]
    fn progress_lines_say_how_far_and_how_fast() {
        assert_eq!(
            progress_text(
                "x",
                512 << 10,
                Some(2 << 20),
                &rate_text(1 << 20, Duration::from_secs(2))
            ),
            "progress x: 512.0 KiB of 2.0 MiB (25%), 512.0 KiB/s"
        );
        assert_eq!(
            progress_text("y", 1024, None, "-"),
            "progress y: 1.0 KiB so far, -"
        );
    }

    /// Lines for the items in flight only, each with its rate since its
    /// last line; none once the item ended.
    #[tokio::test]
    async fn a_line_per_item_in_flight() {
        let multi = MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden());
        let total = Total::new(&multi);
        let m = Meter::new(&multi, &total, "item".into());
        assert!(total.progress_lines().is_empty());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let run = {
            let m = m.clone();
            tokio::spawn(async move { m.around(async { rx.await.ok() }).await })
        };
        tokio::task::yield_now().await;
        while total.in_flight().is_empty() {
            tokio::task::yield_now().await;
        }
        m.grow(100);
        m.inc(40);
        let lines = total.progress_lines();
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("progress item: 40 B of 100 B (40%), "),
            "{lines:?}"
        );
        let f = total.in_flight();
        assert_eq!((f[0].done, f[0].len), (40, Some(100)));
        tx.send(()).unwrap();
        run.await.unwrap();
        assert!(total.progress_lines().is_empty());
    }

    #[tokio::test]
    async fn forms() {
        let multi = MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden());
        let total = Total::new(&multi);
        let m = Meter::new(&multi, &total, "item".into());
        let shown = |m: &Meter| m.s.shown.load(Ordering::Relaxed);
        m.refresh();
        assert_eq!(shown(&m), Shown::Spinner as u8, "length unknown");
        m.unknown(1);
        m.grow(10);
        m.refresh();
        assert_eq!(shown(&m), Shown::Spinner as u8, "one part still unknown");
        m.resolved(5);
        m.refresh();
        assert_eq!(shown(&m), Shown::Bar as u8);
        assert_eq!(m.item.length(), Some(15));
        *m.s.last.lock().unwrap() = Instant::now() - STALL_AFTER;
        m.refresh();
        assert_eq!(shown(&m), Shown::Stalled as u8);
        assert!(m.item.message().starts_with("stalled, no bytes for 3s"));
        m.inc(1);
        m.refresh();
        assert_eq!(shown(&m), Shown::Bar as u8, "bytes again");
        assert_eq!(m.item.message(), "item");
        let sem = Semaphore::new(0);
        let wait = m.slot(&sem);
        tokio::pin!(wait);
        assert!(futures::poll!(&mut wait).is_pending());
        *m.s.last.lock().unwrap() = Instant::now() - STALL_AFTER;
        m.refresh();
        assert_eq!(shown(&m), Shown::Waiting as u8, "queued is not stalled");
    }
}
