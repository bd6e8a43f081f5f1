//! The names of a key's records in the index (`index/<sha256(key)>.json`,
//! its entry) and beside it (`pins/<sha256(key)>.pin`, its pin record:
//! [`super::pins`]), and the parse of a record checked against its name:
//! the one place both folders' names are made and read (a key never
//! becomes a path).

use std::collections::HashSet;

use sha2::{Digest as _, Sha256};

use super::{Entry, Key};
use crate::text::is_hex64;

/// `sha256(key).json`: index files are named by the key's hash.
pub(super) fn index_name(key: &str) -> String {
    format!("{}.json", hex::encode(Sha256::digest(key.as_bytes())))
}

/// Is `name` an index file name the store writes (`<hex64>.json`)?
pub(super) fn is_index_name(name: &str) -> bool {
    name.strip_suffix(".json").is_some_and(is_hex64)
}

/// The name of `key`'s pin record.
pub(super) fn pin_name(key: &str) -> String {
    format!("{}.pin", hex::encode(sha2::Sha256::digest(key.as_bytes())))
}

/// Is `name` a pin record's name (`<hex64>.pin`)?
pub(super) fn is_pin_name(name: &str) -> bool {
    name.strip_suffix(".pin").is_some_and(is_hex64)
}

/// The name of the entry a pin record (by its name) stands beside.
pub(super) fn entry_of_pin(name: &str) -> String {
    format!("{}.json", name.trim_end_matches(".pin"))
}

/// Is `name` the record of `key`: its entry or its pin record?
pub(super) fn names_key(name: &str, key: &str) -> bool {
    if is_pin_name(name) {
        pin_name(key) == name
    } else {
        index_name(key) == name
    }
}

/// The entry names whose pin record a listing holds.
pub(super) fn pinned_entries<'a>(names: impl Iterator<Item = &'a str>) -> HashSet<String> {
    names.filter(|n| is_pin_name(n)).map(entry_of_pin).collect()
}

/// Parse an entry or a pin record the backend gave, checking it against
/// its name (a pin record's is pinned, whatever its body says).
pub(super) fn parse_entry(name: &str, body: &[u8]) -> std::result::Result<Entry, BadEntry> {
    let mut en: Entry =
        serde_json::from_slice(body).map_err(|_| BadEntry::Unparsable(name.to_string()))?;
    if !names_key(name, en.key.as_str()) || !is_hex64(&en.digest) {
        return Err(BadEntry::Mismatch(name.to_string(), en.key));
    }
    en.pinned |= is_pin_name(name);
    Ok(en)
}

/// An index entry a scan cannot take (by its name in `index/`).
#[derive(Debug, thiserror::Error)]
pub(super) enum BadEntry {
    #[error("index entry {0} does not parse")]
    Unparsable(String),
    #[error("index entry {0} does not match its key {1}")]
    Mismatch(String, Key),
}
