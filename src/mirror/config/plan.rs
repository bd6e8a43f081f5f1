//! `mirror plan`: what a config would fetch, item by item, as text or JSON,
//! without fetching anything.

use super::*;

impl Config {
    /// `mirror plan`: every item, one per line (workers grouped, each OCI
    /// item followed by its signature when the sync fetches it).
    pub fn plan_text(&self) -> String {
        let mut out = String::new();
        let sig_line = |out: &mut String, item: &Item| match self.wants_signature(item) {
            Signature::No => {}
            w => out.push_str(&format!(
                "    + cosign signature {}:sha256-<manifest digest>.sig{}\n",
                item_repository(item),
                if w == Signature::Verify {
                    " (verified with --cosign-key)"
                } else {
                    " (where the upstream has it)"
                }
            )),
        };
        let mut seen: Vec<Item> = Vec::new();
        for (i, w) in self.workers.iter().enumerate() {
            out.push_str(&format!(
                "worker {i}: Talos {} (image data {}), Kubernetes {}, schematic {}, {}-{}{}\n",
                w.pull.talos,
                w.pull.release,
                w.pull.kubernetes,
                w.schematic.id,
                w.platform,
                w.arch,
                w.upgrade
                    .as_ref()
                    .map(|u| format!(" ({u})"))
                    .unwrap_or_default()
            ));
            out.push_str(&format!("  disk image  {}\n", w.disk.path()));
            for (p, item) in w.pull.images.iter().zip(&w.oci) {
                let extra = match p.role {
                    crate::pull_list::Role::Installer => " (every platform of the index)",
                    r if r.optional() => " (optional)",
                    _ => "",
                };
                out.push_str(&format!("  {:<11} {}{extra}\n", p.role.name(), p.reference));
                sig_line(&mut out, item);
            }
            seen.extend(w.items());
        }
        let rest: Vec<Item> = self
            .items()
            .into_iter()
            .filter(|i| !seen.contains(i))
            .collect();
        if !rest.is_empty() {
            if !self.workers.is_empty() {
                out.push_str("images, installers, sourceImages, extraImages:\n");
            }
            for item in &rest {
                out.push_str(&format!("  {}\n", item.name()));
                sig_line(&mut out, item);
            }
        }
        let docs = self.factory_docs();
        if !docs.is_empty() {
            out.push_str("factory documents (each kept where the factory offers it):\n");
            for d in &docs {
                out.push_str(&format!("  {}\n", d.path));
            }
        }
        let n = self.items().len();
        out.push_str(&format!("{n} items\n"));
        out
    }

    /// `mirror plan --json`.
    pub fn plan_json(&self) -> serde_json::Value {
        use serde_json::json;
        let sig = |i: &Item| match self.wants_signature(i) {
            Signature::No => json!(null),
            Signature::IfPresent => json!("if-present"),
            Signature::Verify => json!("verify"),
        };
        let item = |i: &Item| {
            let (kind, reference) = match i {
                Item::Image(k) => ("image", k.path()),
                Item::Installer { repo, tag } => (
                    "installer",
                    format!("{}/{repo}:{tag}", crate::pull_list::FACTORY_HOST),
                ),
                Item::Extra(x) => ("oci", x.display()),
                Item::Talosctl(t) => ("talosctl", t.path()),
            };
            json!({"kind": kind, "name": i.name(), "reference": reference, "signature": sig(i)})
        };
        let workers: Vec<_> = self
            .workers
            .iter()
            .map(|w| {
                let mut pull = w.pull.to_json();
                pull["platform"] = json!(w.platform);
                pull["arch"] = json!(w.arch);
                pull["diskImage"] = json!(w.disk.path());
                if let Some(u) = &w.upgrade {
                    pull["upgrade"] = json!(u);
                }
                pull["items"] = json!(w.items().iter().map(item).collect::<Vec<_>>());
                pull
            })
            .collect();
        json!({
            "schematics": self.all_schematics().iter().map(|s| json!({
                "id": s.id,
                "file": s.file.as_ref().map(|p| p.display().to_string()),
            })).collect::<Vec<_>>(),
            "workers": workers,
            "items": self.items().iter().map(item).collect::<Vec<_>>(),
            "factoryDocuments": self.factory_docs()
                .iter()
                .map(|d| d.path.clone())
                .collect::<Vec<_>>(),
        })
    }
}

/// `host/repo` of an OCI item (the factory's host for installers).
pub(super) fn item_repository(item: &Item) -> String {
    match item {
        Item::Image(k) => k.path(),
        Item::Installer { repo, .. } => format!("{}/{repo}", crate::pull_list::FACTORY_HOST),
        Item::Extra(x) => format!("{}/{}", x.host, x.repo),
        Item::Talosctl(t) => t.path(),
    }
}
