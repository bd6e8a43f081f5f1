//! The support matrix: which Kubernetes versions each Talos minor runs.
//!
//! Data lives in `matrix/matrix.yaml`, embedded at build time; `--matrix
//! FILE` replaces it. Semantics follow Talos' compatibility code
//! (`pkg/machinery/compatibility`): per Talos minor an inclusive minimum and
//! an exclusive maximum Kubernetes version (`X.Y.99`), compared on
//! `major.minor.patch` only (pre-release suffixes ignored, a missing patch
//! counts as 0). An unknown Talos minor is refused, never waved through.
//!
//! Library API (what the machine-config code calls):
//! ```
//! use talos_gen::matrix::Matrix;
//! use talos_gen::version::Version;
//! let m = Matrix::embedded();
//! let talos = Version::parse("v1.13.6").unwrap();
//! // Ok: supported; Err(Error::Refused(message)): not supported or unknown Talos minor.
//! assert!(m.check(&talos, &Version::parse("1.35").unwrap()).is_ok());
//! assert!(m.check(&talos, &Version::parse("1.30").unwrap()).is_err());
//! assert_eq!(m.default_kubernetes(&talos).unwrap().to_string(), "v1.36.3");
//! assert_eq!(m.kubelet_patch(&Version::parse("v1.35").unwrap()).unwrap().to_string(), "v1.35.6");
//! ```

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::version::Version;

pub mod release_images;

pub use release_images::{ImageTable, ReleaseImages};

/// The embedded data file.
pub const EMBEDDED: &str = include_str!("../matrix/matrix.yaml");

/// One Talos minor.
#[derive(Debug, Clone, PartialEq)]
pub struct TalosEntry {
    /// `major.minor` of Talos (patch `None`).
    pub talos: Version,
    pub released: Option<String>,
    /// `code` or `docs`: where the bounds come from.
    pub source: Option<String>,
    pub note: Option<String>,
    /// Set while the minor has no release tag to read: where its data
    /// comes from instead (said on stderr by every command that uses it).
    pub pending: Option<String>,
    /// Inclusive minimum Kubernetes version.
    pub kubernetes_min: Version,
    /// Exclusive maximum Kubernetes version (`X.Y.99`).
    pub kubernetes_max: Version,
    /// Default Kubernetes version of the X.0 release.
    pub default_initial: Version,
    /// Default Kubernetes version of the newest patch release.
    pub default_latest: Version,
    /// Minimum Talos version a host may upgrade from (inclusive).
    pub host_upgrade_from: Option<Version>,
    /// Talos versions a host may downgrade to are below this (exclusive).
    pub host_downgrade_below: Option<Version>,
    /// Host versions Talos refuses to upgrade from to this minor
    /// (`DeniedHostUpgradeVersions`; empty in every release so far).
    pub host_upgrade_denied: Vec<Version>,
    /// The newest Talos release of this minor the data knows (`1.13.9`): the
    /// image tag a version given without a patch becomes.
    pub newest: Option<Version>,
}

impl TalosEntry {
    /// Does this Talos minor run Kubernetes `k8s`?
    pub fn supports(&self, k8s: &Version) -> bool {
        let core = k8s.core();
        core >= self.kubernetes_min.core() && core < self.kubernetes_max.core()
    }

    /// The Kubernetes minors in the window, `v1.31`, `v1.32`, ...
    pub fn supported_minors(&self) -> Vec<String> {
        let (min_major, min_minor, _) = self.kubernetes_min.core();
        let max = self.kubernetes_max.core();
        let mut out = Vec::new();
        if min_major != max.0 {
            // Talos never spans a Kubernetes major; show the bounds instead.
            return vec![
                self.kubernetes_min.to_string(),
                format!("< {}", self.kubernetes_max),
            ];
        }
        let mut minor = min_minor;
        // The maximum is exclusive: X.Y.99 includes Y, X.Y.0 does not.
        let last = if max.2 == 0 {
            max.1.saturating_sub(1)
        } else {
            max.1
        };
        while minor <= last && out.len() < 1000 {
            out.push(format!("v{min_major}.{minor}"));
            minor += 1;
        }
        out
    }

    fn supported_list(&self) -> String {
        self.supported_minors().join(", ")
    }
}

/// The answer to a supported pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Support {
    pub talos: Version,
    pub kubernetes: Version,
    /// `Kubernetes v1.35 is supported by Talos v1.13.6 (supported versions: ...)`.
    pub message: String,
}

/// The whole table.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    entries: Vec<TalosEntry>,
    /// Kubernetes minor `(major, minor)` -> kubelet version (Cozystack chart table).
    kubelet: BTreeMap<(u64, u64), Version>,
    /// The per-release image table (`matrix/images.yaml`, or the file's `images:`).
    images: ImageTable,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawFile {
    talos: Vec<RawEntry>,
    #[serde(default)]
    cozystack_kubelet: Option<BTreeMap<String, String>>,
    /// Rows of the image table (the shape of `matrix/images.yaml`'s `releases`).
    #[serde(default)]
    images: Option<Vec<release_images::RawRelease>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawEntry {
    talos: String,
    #[serde(default)]
    released: Option<String>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    pending: Option<String>,
    kubernetes: RawRange,
    default_kubernetes: RawDefault,
    #[serde(default)]
    host_upgrade: Option<RawHost>,
    #[serde(default)]
    newest: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRange {
    min: String,
    max: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefault {
    initial: String,
    latest: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    below: Option<String>,
    #[serde(default)]
    denied: Vec<String>,
}

impl TalosEntry {
    /// Row `i` of the file's `talos:` list, each field checked.
    fn parse(i: usize, e: RawEntry, what: &str) -> Result<TalosEntry> {
        let at = |field: &str| format!("{what}: talos[{i}].{field}");
        let talos = Version::parse_named(&e.talos, &at("talos"))?;
        if talos.patch.is_some() || talos.pre.is_some() {
            return Err(Error::bad_input(format!(
                "{}: {:?} must be a Talos minor such as \"1.13\"",
                at("talos"),
                e.talos
            )));
        }
        let min = Version::parse_named(&e.kubernetes.min, &at("kubernetes.min"))?;
        let max = Version::parse_named(&e.kubernetes.max, &at("kubernetes.max"))?;
        if min.core() >= max.core() {
            return Err(Error::bad_input(format!(
                "{}: minimum {min} is not below maximum {max}",
                at("kubernetes")
            )));
        }
        let initial = Version::parse_named(
            &e.default_kubernetes.initial,
            &at("defaultKubernetes.initial"),
        )?;
        let latest = Version::parse_named(
            &e.default_kubernetes.latest,
            &at("defaultKubernetes.latest"),
        )?;
        let (from, below, denied) = match e.host_upgrade {
            Some(h) => (
                h.from
                    .map(|v| Version::parse_named(&v, &at("hostUpgrade.from")))
                    .transpose()?,
                h.below
                    .map(|v| Version::parse_named(&v, &at("hostUpgrade.below")))
                    .transpose()?,
                h.denied
                    .iter()
                    .map(|v| Version::parse_named(v, &at("hostUpgrade.denied")))
                    .collect::<Result<Vec<_>>>()?,
            ),
            None => (None, None, Vec::new()),
        };
        let newest = e
            .newest
            .map(|v| Version::parse_named(&v, &at("newest")))
            .transpose()?;
        if let Some(n) = &newest
            && (n.patch.is_none() || n.pre.is_some() || n.minor_key() != talos.minor_key())
        {
            return Err(Error::bad_input(format!(
                "{}: {n} must be a stable release (X.Y.Z, no pre-release) of Talos {talos}",
                at("newest")
            )));
        }
        let entry = TalosEntry {
            talos,
            released: e.released,
            source: e.source,
            note: e.note,
            pending: e.pending,
            kubernetes_min: min,
            kubernetes_max: max,
            default_initial: initial,
            default_latest: latest,
            host_upgrade_from: from,
            host_downgrade_below: below,
            host_upgrade_denied: denied,
            newest,
        };
        for (field, d) in [
            ("defaultKubernetes.initial", &entry.default_initial),
            ("defaultKubernetes.latest", &entry.default_latest),
        ] {
            if !entry.supports(d) {
                return Err(Error::bad_input(format!(
                    "{}: {d} is outside the entry's own Kubernetes range",
                    at(field)
                )));
            }
        }
        Ok(entry)
    }
}

/// `cozystackKubelet`: Kubernetes minor -> the patch Cozystack's kubelet is.
fn kubelet_table(
    table: BTreeMap<String, String>,
    what: &str,
) -> Result<BTreeMap<(u64, u64), Version>> {
    let mut out = BTreeMap::new();
    for (k, v) in table {
        let minor = Version::parse_named(&k, &format!("{what}: cozystackKubelet key"))?;
        let patch = Version::parse_named(&v, &format!("{what}: cozystackKubelet.{k}"))?;
        if minor.patch.is_some() || patch.minor_key() != minor.minor_key() {
            return Err(Error::bad_input(format!(
                "{what}: cozystackKubelet.{k}: {v:?} must be a patch of the minor {k:?}"
            )));
        }
        out.insert(minor.minor_key(), patch);
    }
    Ok(out)
}

impl Matrix {
    /// The embedded matrix (parsed once).
    pub fn embedded() -> &'static Matrix {
        static M: OnceLock<Matrix> = OnceLock::new();
        M.get_or_init(|| {
            Matrix::parse(EMBEDDED, "embedded matrix/matrix.yaml", None)
                .expect("the embedded matrix is valid (tested)")
        })
    }

    /// Parse a data file; `fallback` supplies the kubelet table when the file has none.
    pub fn from_yaml(text: &str, what: &str) -> Result<Matrix> {
        Matrix::parse(text, what, Some(Matrix::embedded()))
    }

    fn parse(text: &str, what: &str, fallback: Option<&Matrix>) -> Result<Matrix> {
        let raw: RawFile = crate::yaml::from_str(text, what)?;
        if raw.talos.is_empty() {
            return Err(Error::bad_input(format!("{what}: talos: empty list")));
        }
        let mut entries: Vec<TalosEntry> = Vec::with_capacity(raw.talos.len());
        for (i, e) in raw.talos.into_iter().enumerate() {
            let entry = TalosEntry::parse(i, e, what)?;
            let at = |field: &str| format!("{what}: talos[{i}].{field}");
            if entries
                .iter()
                .any(|x| x.talos.minor_key() == entry.talos.minor_key())
            {
                return Err(Error::bad_input(format!(
                    "{}: Talos {} appears twice",
                    at("talos"),
                    entry.talos
                )));
            }
            entries.push(entry);
        }
        entries.sort_by_key(|e| e.talos.minor_key());
        let kubelet = match raw.cozystack_kubelet {
            Some(table) => kubelet_table(table, what)?,
            None => fallback.map(|m| m.kubelet.clone()).unwrap_or_default(),
        };
        let images = match (raw.images, fallback) {
            (Some(rows), _) => ImageTable::from_raw(rows, &format!("{what}: images"))?,
            (None, Some(m)) => m.images.clone(),
            (None, None) => {
                ImageTable::from_yaml(release_images::EMBEDDED, "embedded matrix/images.yaml")?
            }
        };
        Ok(Matrix {
            entries,
            kubelet,
            images,
        })
    }

    /// Every Talos minor, oldest first.
    pub fn entries(&self) -> &[TalosEntry] {
        &self.entries
    }

    /// The entry for `talos`'s minor; refused (exit 1) when the matrix does not know it.
    pub fn entry(&self, talos: &Version) -> Result<&TalosEntry> {
        self.entries
            .iter()
            .find(|e| e.talos.minor_key() == talos.minor_key())
            .ok_or_else(|| {
                let known: Vec<String> = self.entries.iter().map(|e| e.talos.to_string()).collect();
                let known = if known.is_empty() {
                    String::new()
                } else {
                    format!(" (it knows {})", known.join(", "))
                };
                // `v1.99.1 (minor v1.99)`; a bare minor is not said twice.
                let minor = if talos.patch.is_some() {
                    format!(" (minor {})", talos.minor_string())
                } else {
                    String::new()
                };
                Error::refused(format!(
                    "the support matrix does not know Talos {talos}{minor}{known}"
                ))
            })
    }

    /// Is Kubernetes `k8s` supported by Talos `talos`? `Ok` with the message
    /// when it is; `Err(Error::Refused(message))` when it is not, or when the
    /// Talos minor is unknown.
    pub fn check(&self, talos: &Version, k8s: &Version) -> Result<Support> {
        let e = self.entry(talos)?;
        if e.supports(k8s) {
            Ok(Support {
                talos: talos.clone(),
                kubernetes: k8s.clone(),
                message: format!(
                    "Kubernetes {k8s} is supported by Talos {talos}. Supported versions: {}",
                    e.supported_list()
                ),
            })
        } else {
            Err(Error::refused(format!(
                "Kubernetes {k8s} is not supported by Talos {talos}. Supported versions: {}",
                e.supported_list()
            )))
        }
    }

    /// The Kubernetes version Talos `talos` defaults to (that of the newest
    /// patch release of its minor); refused when the minor is unknown.
    pub fn default_kubernetes(&self, talos: &Version) -> Result<Version> {
        Ok(self.entry(talos)?.default_latest.clone())
    }

    /// `note: ...` for stderr when `talos`'s minor has no release tag to
    /// read yet (the row's `pending`: where its data comes from instead).
    pub fn pending_note(&self, talos: &Version) -> Option<String> {
        let e = self.entry(talos).ok()?;
        let why = e.pending.as_deref()?;
        Some(format!("note: Talos {talos}: {why}"))
    }

    /// The newest Talos release of `talos`'s minor the data knows, if any.
    pub fn newest_release(&self, talos: &Version) -> Option<&Version> {
        self.entry(talos).ok()?.newest.as_ref()
    }

    /// The Talos release `text` (named `what`) names: a full release as
    /// written; a bare minor (`v1.13`) the newest release of it the data
    /// knows, with a note saying so (as `machineconfig` resolves one for
    /// its install image). Bad input when `text` is not a version; refused
    /// when the minor is unknown or has no release.
    pub fn release_of(&self, text: &str, what: &str) -> Result<(String, Option<String>)> {
        let v = Version::parse_named(text, what)?;
        if v.patch.is_some() {
            return Ok((text.trim().to_string(), None));
        }
        let newest = self.entry(&v)?.newest.as_ref().ok_or_else(|| {
            Error::refused(format!(
                "{what}: the support matrix names no release of Talos {v}; give a full release (e.g. {v}.0)"
            ))
        })?;
        let note = format!(
            "note: {what} {v} has no patch; using {newest}, the newest {v} release the support matrix knows (give a full release to choose another)"
        );
        Ok((newest.to_string(), Some(note)))
    }

    /// The Cozystack chart's kubelet version for a Kubernetes minor (`v1.35`
    /// -> `v1.35.6`); only the minor of `k8s` is looked at. `None` when the
    /// chart has no entry for it.
    pub fn kubelet_patch(&self, k8s: &Version) -> Option<&Version> {
        self.kubelet.get(&k8s.minor_key())
    }

    /// The patch a bare Kubernetes minor (`1.36`) means: the Cozystack
    /// kubelet table's, else `release_default` (a Talos release's own
    /// default) when of that minor and stable, else the newest stable patch
    /// of that minor the support matrix or the image data names. With the
    /// source of the choice for a note; `None` when the data knows none.
    pub fn kubernetes_patch(
        &self,
        k8s: &Version,
        release_default: Option<&Version>,
    ) -> Option<(Version, &'static str)> {
        if let Some(v) = self.kubelet_patch(k8s) {
            return Some((v.clone(), "the Cozystack kubelet table's"));
        }
        let stable =
            |v: &&Version| v.minor_key() == k8s.minor_key() && v.pre.is_none() && v.patch.is_some();
        if let Some(d) = release_default.filter(stable) {
            return Some((d.clone(), "the Talos release's default"));
        }
        self.entries
            .iter()
            .flat_map(|e| [&e.default_initial, &e.default_latest])
            .chain(
                self.images
                    .releases()
                    .iter()
                    .filter_map(|r| r.kubernetes.as_ref()),
            )
            .filter(stable)
            .max_by(|a, b| crate::matrix::release_images::release_cmp(a, b))
            .map(|v| {
                (
                    v.clone(),
                    "the newest patch of its minor the support matrix and image data name",
                )
            })
    }

    /// The per-release image table.
    pub fn images(&self) -> &ImageTable {
        &self.images
    }

    /// The kubelet table, oldest minor first.
    pub fn kubelet_table(&self) -> impl Iterator<Item = (String, &Version)> {
        self.kubelet
            .iter()
            .map(|((a, b), v)| (format!("v{a}.{b}"), v))
    }

    /// The machine-readable table (`matrix --json`, `GET /api/v1/matrix`).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::{Value, json};
        let opt = |v: &Option<Version>| v.as_ref().map_or(Value::Null, |v| json!(v.to_string()));
        let talos: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                json!({
                    "talos": e.talos.to_string(),
                    "kubernetesMin": e.kubernetes_min.to_string(),
                    "kubernetesMax": e.kubernetes_max.to_string(),
                    "kubernetesMinors": e.supported_minors(),
                    "defaultKubernetes": e.default_latest.to_string(),
                    "defaultKubernetesInitial": e.default_initial.to_string(),
                    "hostUpgradeFrom": opt(&e.host_upgrade_from),
                    "hostDowngradeBelow": opt(&e.host_downgrade_below),
                    "released": e.released,
                    "source": e.source,
                    "note": e.note,
                    "pending": e.pending,
                })
            })
            .collect();
        let kubelet: serde_json::Map<String, Value> = self
            .kubelet_table()
            .map(|(k, v)| (k, json!(v.to_string())))
            .collect();
        json!({ "talos": talos, "cozystackKubelet": kubelet })
    }

    /// The human-readable table (`talos-gen matrix`).
    pub fn to_table(&self) -> String {
        let mut rows: Vec<[String; 5]> = vec![[
            "TALOS".into(),
            "KUBERNETES".into(),
            "DEFAULT".into(),
            "HOST UPGRADE FROM".into(),
            "SOURCE".into(),
        ]];
        for e in &self.entries {
            let minors = e.supported_minors();
            let range = match (minors.first(), minors.last()) {
                (Some(a), Some(b)) => format!("{a} - {b}"),
                _ => String::new(),
            };
            rows.push([
                e.talos.to_string(),
                range,
                e.default_latest.to_string(),
                e.host_upgrade_from
                    .as_ref()
                    .map_or("-".to_string(), |v| v.to_string()),
                e.source.clone().unwrap_or_default(),
            ]);
        }
        let mut widths = [0usize; 5];
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.len());
            }
        }
        let mut out = String::new();
        for r in &rows {
            let mut line = String::new();
            for (i, (c, w)) in r.iter().zip(widths).enumerate() {
                if i + 1 == r.len() {
                    line.push_str(c);
                } else {
                    line.push_str(&format!("{c:<w$}  "));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        if !self.kubelet.is_empty() {
            out.push_str("\nCozystack kubelet versions:");
            for (k, v) in self.kubelet_table() {
                out.push_str(&format!(" {k}={v}"));
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn embedded_parses_and_covers_1_0_to_1_15() {
        let m = Matrix::embedded();
        let minors: Vec<_> = m.entries().iter().map(|e| e.talos.minor_key()).collect();
        let want: Vec<_> = (0..=15).map(|i| (1, i)).collect();
        assert_eq!(minors, want);
    }

    #[test]
    fn examples_from_the_issue() {
        let m = Matrix::embedded();
        assert!(m.check(&v("v1.13.6"), &v("v1.35")).is_ok());
        let e = m.check(&v("v1.13.6"), &v("v1.30")).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert_eq!(
            e.to_string(),
            "Kubernetes v1.30 is not supported by Talos v1.13.6. Supported versions: v1.31, v1.32, v1.33, v1.34, v1.35, v1.36"
        );
        assert!(m.check(&v("v1.7.0"), &v("1.25.0")).is_ok());
        assert!(m.check(&v("v1.7.0"), &v("1.31.0")).is_err());
        assert!(m.check(&v("v1.0.6"), &v("1.23")).is_ok());
    }

    #[test]
    fn bounds_and_suffixes() {
        let m = Matrix::embedded();
        // max is exclusive at X.Y.99: every 1.36 patch passes, 1.37.0 does not.
        assert!(m.check(&v("1.13"), &v("1.36.98")).is_ok());
        assert!(m.check(&v("1.13"), &v("1.36.99")).is_err());
        assert!(m.check(&v("1.13"), &v("1.37.0")).is_err());
        assert!(m.check(&v("1.13"), &v("1.31.0")).is_ok());
        // pre-release suffixes are ignored on both sides.
        assert!(m.check(&v("v1.14.0-rc.1"), &v("v1.37.0-alpha.1")).is_ok());
        assert!(m.check(&v("v1.13.0-beta.0"), &v("1.31.0-rc.0")).is_ok());
        // 1.14 follows the code: 1.32 passes though the docs start at 1.33.
        assert!(m.check(&v("1.14"), &v("1.32")).is_ok());
        assert!(m.check(&v("1.14"), &v("1.31.9")).is_err());
    }

    /// Talos 1.15 before its tag: its row from talos115.go on Talos main
    /// at ad8823176e75, accepted, and every use says where it comes from.
    #[test]
    fn talos_1_15_is_accepted_and_says_where_its_data_comes_from() {
        let m = Matrix::embedded();
        assert!(m.check(&v("1.15.0"), &v("1.33.0")).is_ok());
        assert!(m.check(&v("1.15"), &v("1.38.5")).is_ok());
        assert!(m.check(&v("1.15"), &v("1.32.9")).is_err());
        assert!(m.check(&v("1.15"), &v("1.39.0")).is_err());
        let e = m.entry(&v("1.15")).unwrap();
        assert_eq!(e.host_upgrade_from, Some(v("1.13.0")));
        assert_eq!(e.host_downgrade_below, Some(v("1.17.0")));
        let n = m.pending_note(&v("v1.15.0")).unwrap();
        assert!(n.contains("ad8823176e75") && n.contains("v1.15.0"), "{n}");
        assert_eq!(m.pending_note(&v("v1.14.6")), None);
        let row = m.images().lookup(&v("v1.15.0")).unwrap().release;
        assert_eq!(
            row.coredns.as_deref(),
            Some("registry.k8s.io/coredns/coredns:v1.14.7")
        );
        assert!(row.carried.as_deref().unwrap().contains("ad8823176e75"));
        // A pre-release is taken only as the data names it in full.
        assert!(m.images().lookup(&v("v1.15.0-beta.0")).is_err());
    }

    #[test]
    fn unknown_minor_is_refused() {
        let m = Matrix::embedded();
        for t in ["1.16.0", "0.14", "2.0"] {
            let e = m.check(&v(t), &v("1.35")).unwrap_err();
            assert_eq!(e.exit_code(), 1);
            assert!(e.to_string().contains("does not know Talos"), "{e}");
        }
    }

    #[test]
    fn defaults_and_kubelet() {
        let m = Matrix::embedded();
        assert_eq!(m.default_kubernetes(&v("1.13.6")).unwrap(), v("1.36.3"));
        assert_eq!(m.default_kubernetes(&v("1.12")).unwrap(), v("1.35.4"));
        assert_eq!(m.kubelet_patch(&v("v1.35")), Some(&v("v1.35.6")));
        assert_eq!(m.kubelet_patch(&v("1.31.2")), Some(&v("v1.31.14")));
        assert_eq!(m.kubelet_patch(&v("1.36")), None);
    }

    #[test]
    fn replacement_files() {
        let good = "talos:\n  - talos: \"1.99\"\n    kubernetes: {min: \"1.40.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.41.0\", latest: \"1.41.2\"}\n";
        let m = Matrix::from_yaml(good, "t").unwrap();
        assert!(m.check(&v("1.99.3"), &v("1.41")).is_ok());
        assert!(m.check(&v("1.13"), &v("1.35")).is_err());
        // No kubelet table in the file: the embedded one is kept.
        assert_eq!(m.kubelet_patch(&v("1.35")), Some(&v("1.35.6")));
        // No images section either: the embedded image table is kept.
        assert_eq!(m.images(), Matrix::embedded().images());
        // An images section replaces it.
        let with_images = format!(
            "{good}images:\n  - talos: v1.99.3\n    pause: registry.example/pause:9\n    kubelet: registry.example/kubelet\n    installer: registry.example/installer\n"
        );
        let m = Matrix::from_yaml(&with_images, "t").unwrap();
        assert_eq!(m.images().releases().len(), 1);
        assert_eq!(
            m.images().lookup(&v("1.99.3")).unwrap().release.pause,
            "registry.example/pause:9"
        );
        let e = Matrix::from_yaml(&format!("{good}images: []\n"), "t").unwrap_err();
        assert_eq!(e.to_string(), "t: images: empty list");
        for bad in [
            "",
            "talos: []\n",
            "talos: 3\n",
            "talos:\n  - talos: \"1.1\"\n",
            "talos:\n  - talos: \"1.99.1\"\n    kubernetes: {min: \"1.40.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.41.0\", latest: \"1.41.2\"}\n",
            "talos:\n  - talos: \"1.99\"\n    kubernetes: {min: \"1.42.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.41.0\", latest: \"1.41.2\"}\n",
            "talos:\n  - talos: \"1.99\"\n    kubernetes: {min: \"1.40.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.39.0\", latest: \"1.41.2\"}\n",
            "talos:\n  - talos: \"1.99\"\n    bogus: 1\n    kubernetes: {min: \"1.40.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.41.0\", latest: \"1.41.2\"}\n",
            "talos:\n  - talos: \"x\"\n    kubernetes: {min: \"1.40.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.41.0\", latest: \"1.41.2\"}\n",
        ] {
            let e = Matrix::from_yaml(bad, "t").unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
            assert!(e.to_string().starts_with("t: "), "{e}");
        }
    }

    #[test]
    fn table_and_json() {
        let m = Matrix::embedded();
        let t = m.to_table();
        assert!(
            t.lines()
                .any(|l| l.starts_with("v1.13") && l.contains("v1.31 - v1.36")),
            "{t}"
        );
        let j = m.to_json();
        assert_eq!(j["talos"][13]["talos"], "v1.13");
        assert_eq!(j["talos"][13]["kubernetesMax"], "v1.36.99");
        assert_eq!(j["cozystackKubelet"]["v1.35"], "v1.35.6");
    }
}
