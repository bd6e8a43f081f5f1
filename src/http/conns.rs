//! The open connections and their bound (`--max-connections`). A new
//! connection past the bound takes the place of the oldest one with no
//! request in flight (an idle keep-alive, or a head still arriving: what a
//! flood of slow or silent clients holds), which is closed for it, as nginx
//! reuses its idle connections; when every open connection has a request
//! in flight, the new one is closed instead. So a flood cannot take every
//! file descriptor (the store's files, the upstream sockets) nor keep a
//! probe out, and a request in flight is never cut for it.
//!
//! A connection is busy from the moment its request reaches the router
//! ([`track`]) until the answer's body is dropped (sent, or given up).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::Notify;

/// The open connections, oldest first.
pub struct Connections {
    max: usize,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next: u64,
    open: BTreeMap<u64, Slot>,
}

struct Slot {
    busy: Arc<AtomicUsize>,
    close: Arc<Notify>,
}

/// One admitted connection: its requests in flight, and the signal that it
/// is to close for a newer one. Leaves the table when dropped.
pub struct Conn {
    id: u64,
    conns: Arc<Connections>,
    pub busy: Busy,
    pub close: Arc<Notify>,
}

/// A connection's requests in flight (a request extension).
#[derive(Clone, Default)]
pub struct Busy(Arc<AtomicUsize>);

impl Connections {
    pub fn new(max: usize) -> Arc<Connections> {
        Arc::new(Connections {
            max: max.max(1),
            table: Mutex::new(Table::default()),
        })
    }

    /// The default bound: three quarters of the process's open-file limit
    /// (the rest for the store's files, spool files and upstream sockets),
    /// at least 64.
    pub fn default_max() -> usize {
        // `Max open files  <soft>  <hard>  files` (Linux; read, not asked
        // through libc, which would take an FFI call this module need not).
        let soft = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
            })
            .map_or(1024, |v| v.parse::<u64>().unwrap_or(1 << 20));
        (soft.min(1 << 20) as usize * 3 / 4).max(64)
    }

    /// Admit a new connection: past the bound, the oldest idle one is told
    /// to close (and leaves the table now); `None` when none is idle.
    pub fn admit(self: &Arc<Self>) -> Option<Conn> {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if t.open.len() >= self.max {
            let idle = t
                .open
                .iter()
                .find(|(_, s)| s.busy.load(Ordering::Acquire) == 0)
                .map(|(id, _)| *id)?;
            if let Some(s) = t.open.remove(&idle) {
                s.close.notify_one();
            }
        }
        let id = t.next;
        t.next += 1;
        let busy = Busy::default();
        let close = Arc::new(Notify::new());
        t.open.insert(
            id,
            Slot {
                busy: busy.0.clone(),
                close: close.clone(),
            },
        );
        Some(Conn {
            id,
            conns: self.clone(),
            busy,
            close,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .open
            .len()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut t = self.conns.table.lock().unwrap_or_else(|p| p.into_inner());
        t.open.remove(&self.id);
    }
}

/// Middleware (outermost): the connection is busy while this request is
/// answered, its body included.
pub async fn track(req: Request, next: Next) -> Response {
    let Some(busy) = req.extensions().get::<Busy>().cloned() else {
        return next.run(req).await;
    };
    busy.0.fetch_add(1, Ordering::AcqRel);
    let guard = InFlight(busy);
    let resp = next.run(req).await;
    resp.map(|inner| super::watched::Watched::body(inner, guard))
}

/// One request in flight, until dropped.
struct InFlight(Busy);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The answer's body holds its request in flight until it is dropped.
impl super::watched::Watch for InFlight {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_idle_connection_makes_room_and_busy_ones_stay() {
        let c = Connections::new(3);
        let a = c.admit().unwrap();
        let b = c.admit().unwrap();
        let d = c.admit().unwrap();
        a.busy.0.fetch_add(1, Ordering::AcqRel);
        // Past the bound: b (the oldest idle) is told to close, not a.
        let e = c.admit().unwrap();
        assert_eq!(c.open(), 3);
        use futures::FutureExt;
        assert!(
            b.close.notified().now_or_never().is_some(),
            "b told to close"
        );
        assert!(a.close.notified().now_or_never().is_none(), "a busy, kept");
        drop(b);
        // d and e idle, a busy: d goes next.
        d.busy.0.fetch_add(1, Ordering::AcqRel);
        e.busy.0.fetch_add(1, Ordering::AcqRel);
        // Every one busy: the new one is refused.
        assert!(c.admit().is_none());
        assert_eq!(c.open(), 3);
        drop(a);
        assert_eq!(c.open(), 2);
        assert!(c.admit().is_some());
        let max = Connections::default_max();
        assert!(max >= 64, "{max}");
    }
}
