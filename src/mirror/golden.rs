//! The (schematic, release) of every Cozystack golden a mirror config
//! implies: each `openstack-amd64.raw.xz` disk image it names (its
//! `schematics` x `talosVersions` x `images`, its `workers:` and the pairs
//! of its `upgrades:`), for `datavolume catalog --config`.

use super::config::{Config, Item};
use crate::datavolume::cozystack::{ARCH, PLATFORM};

/// `(schematic ID, release)`, once each, in the config's item order.
pub fn golden_pairs(config: &Config) -> Vec<(String, String)> {
    let asset = format!("{PLATFORM}-{ARCH}.raw.xz");
    let mut out: Vec<(String, String)> = Vec::new();
    for item in config.items() {
        if let Item::Image(k) = item
            && k.asset == asset
        {
            let pair = (k.schematic.clone(), k.version.clone());
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
    }
    out
}
