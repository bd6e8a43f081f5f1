//! [`KeyedLocks`]: one async mutex per key, dropped with its last holder.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One async mutex per key, so one upstream fetch runs per key at a time.
#[derive(Default)]
pub(crate) struct KeyedLocks {
    map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl KeyedLocks {
    pub(crate) async fn lock(&self, key: &str) -> KeyedGuard<'_> {
        let m = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(key.to_string()).or_default().clone()
        };
        let guard = m.clone().lock_owned().await;
        KeyedGuard {
            locks: self,
            key: key.to_string(),
            guard: Some(guard),
        }
    }
}

pub(crate) struct KeyedGuard<'a> {
    locks: &'a KeyedLocks,
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for KeyedGuard<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut map = self.locks.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = map.get(&self.key)
            && Arc::strong_count(m) == 1
        {
            map.remove(&self.key);
        }
    }
}
