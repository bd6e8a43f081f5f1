//! Upgrade planning: the fewest steps from one (Talos, Kubernetes) pair to
//! another, each step changing one of the two, by Talos' own rules, and the
//! images every pair on the way pulls.
//!
//! The rules, each a function tested against the cases of the code it
//! follows:
//! - a pair is one the support matrix accepts ([`Matrix::check`], Talos'
//!   `KubernetesVersion.SupportedWith`);
//! - a Kubernetes step stays in its minor or goes to the next one, never
//!   down (go-kubernetes `upgrade.Path.IsSupported`, [`kubernetes_step`]);
//! - an in-place Talos step goes to a minor whose host window admits the
//!   running release, never a denied one (Talos'
//!   `TalosVersion.UpgradeableFrom`, [`host_upgrade`]); with `replace` the
//!   window does not apply.
//!
//! The plan is a breadth-first search over the two ends, the newest stable
//! release of every Talos minor, and the patch [`Matrix::kubernetes_patch`]
//! names for each Kubernetes minor between; ties go to [`TIE_BREAK`].
//! Pure: the caller loads the matrix.
//!
//! ```
//! use talos_gen::upgrade::{plan, Question};
//! let m = talos_gen::matrix::Matrix::embedded();
//! let p = plan(m, &Question { from_talos: "v1.12.11", from_kubernetes: "1.35.6",
//!     to_talos: "v1.13.9", to_kubernetes: "1.36.3", ..Default::default() }).unwrap();
//! assert_eq!(p.to_text(), "1. talos v1.13.9 (leaves talos v1.13.9, kubernetes 1.35.6)\n\
//!                          2. kubernetes 1.36.3 (leaves talos v1.13.9, kubernetes 1.36.3)\n");
//! ```

use std::cmp::Ordering;
use std::collections::VecDeque;

use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::matrix::release_images::release_cmp;
use crate::pull_list::{Pull, PullRequest};
use crate::version::Version;

/// The tie-break rule, as `--help` states it.
pub const TIE_BREAK: &str = "Between plans of equal length the first in this order wins: steps compared one by one from the first, a Talos step before a Kubernetes step, a lower version before a higher one (so Talos moves as early and in hops as small as a shortest plan allows).";

/// A (Talos, Kubernetes) pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    pub talos: Version,
    pub kubernetes: Version,
}

impl Pair {
    /// `{"talos": "v1.13.9", "kubernetes": "1.36.3"}`: Talos with its `v`,
    /// Kubernetes without, as the contract writes them.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "talos": self.talos.to_string(),
            "kubernetes": k8s_text(&self.kubernetes),
        })
    }
}

/// `1.36.3`: a Kubernetes version without its `v`.
pub fn k8s_text(v: &Version) -> String {
    v.to_string().trim_start_matches('v').to_string()
}

/// Which half of the pair a step changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    Talos,
    Kubernetes,
}

impl Change {
    pub fn name(self) -> &'static str {
        match self {
            Change::Talos => "talos",
            Change::Kubernetes => "kubernetes",
        }
    }
}

/// One step: what changes, and the pair the cluster is at after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub change: Change,
    pub pair: Pair,
}

/// How the inputs are named in messages.
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    pub from_talos: &'a str,
    pub from_kubernetes: &'a str,
    pub to_talos: &'a str,
    pub to_kubernetes: &'a str,
}

/// The CLI's flags.
pub const FLAGS: Names<'static> = Names {
    from_talos: "--from-talos",
    from_kubernetes: "--from-kubernetes",
    to_talos: "--to-talos",
    to_kubernetes: "--to-kubernetes",
};

/// The API's query keys (and the mirror config's fields).
pub const QUERY: Names<'static> = Names {
    from_talos: "fromTalos",
    from_kubernetes: "fromKubernetes",
    to_talos: "toTalos",
    to_kubernetes: "toKubernetes",
};

impl Default for Names<'_> {
    fn default() -> Self {
        FLAGS
    }
}

/// The question, as typed.
#[derive(Debug, Clone, Default)]
pub struct Question<'a> {
    /// The running Talos release (`v1.11.6`; a patch is required).
    pub from_talos: &'a str,
    /// The running Kubernetes version (`1.31.4`; a patch is required).
    pub from_kubernetes: &'a str,
    /// The target release, or a minor (its newest release the data knows).
    pub to_talos: &'a str,
    /// The target version, or a minor (the patch the data names for it).
    pub to_kubernetes: &'a str,
    /// Talos steps replace machines: no host-upgrade window.
    pub replace: bool,
    pub names: Names<'a>,
}

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub from: Pair,
    pub to: Pair,
    pub replace: bool,
    pub steps: Vec<Step>,
    /// For stderr: which releases and patches the plan chose.
    pub notes: Vec<String>,
}

impl Plan {
    /// The contract's JSON (`--json`, `GET /api/v1/upgrade-plan`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "from": self.from.to_json(),
            "to": self.to.to_json(),
            "replace": self.replace,
            "steps": self.steps.iter().map(|s| serde_json::json!({
                "change": s.change.name(),
                "talos": s.pair.talos.to_string(),
                "kubernetes": k8s_text(&s.pair.kubernetes),
            })).collect::<Vec<_>>(),
        })
    }

    /// One line a step: `1. talos v1.12.11 (leaves talos v1.12.11, kubernetes 1.31.4)`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (i, s) in self.steps.iter().enumerate() {
            let what = match s.change {
                Change::Talos => s.pair.talos.to_string(),
                Change::Kubernetes => k8s_text(&s.pair.kubernetes),
            };
            out.push_str(&format!(
                "{}. {} {what} (leaves talos {}, kubernetes {})\n",
                i + 1,
                s.change.name(),
                s.pair.talos,
                k8s_text(&s.pair.kubernetes)
            ));
        }
        out
    }

    /// Every pair on the way, the starting one first.
    pub fn pairs(&self) -> Vec<&Pair> {
        std::iter::once(&self.from)
            .chain(self.steps.iter().map(|s| &s.pair))
            .collect()
    }
}

/// Why Talos refuses an in-place upgrade (or downgrade) of a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRefusal {
    /// The matrix knows no such target minor (or none of its window).
    Unsupported,
    /// Below the target minor's `hostUpgrade.from`.
    TooOld,
    /// At or above the target minor's `hostUpgrade.below`.
    TooNew,
    /// A version the target minor denies.
    Denied,
}

/// Talos' `UpgradeableFrom`: may a host running `running` upgrade (or
/// downgrade) in place to `target`? Compared on `major.minor.patch`, as
/// Talos does (a pre-release host counts as its release); a denied version
/// is refused by its exact text.
pub fn host_upgrade(
    matrix: &Matrix,
    running: &Version,
    target: &Version,
) -> std::result::Result<(), (HostRefusal, String)> {
    let entry = matrix.entry(target).ok();
    let window = entry.and_then(|e| {
        Some((
            e.host_upgrade_from.as_ref()?,
            e.host_downgrade_below.as_ref()?,
            &e.host_upgrade_denied,
        ))
    });
    let Some((from, below, denied)) = window else {
        return Err((
            HostRefusal::Unsupported,
            format!(
                "upgrades to version {target} are not supported (the data has no host-upgrade window for Talos {})",
                target.minor_string()
            ),
        ));
    };
    if running.core() < from.core() {
        return Err((
            HostRefusal::TooOld,
            format!(
                "host version {running} is too old to upgrade to Talos {target} (hostUpgrade.from {from})"
            ),
        ));
    }
    if running.core() >= below.core() {
        return Err((
            HostRefusal::TooNew,
            format!(
                "host version {running} is too new to downgrade to Talos {target} (hostUpgrade.below {below})"
            ),
        ));
    }
    if denied.iter().any(|d| d == running) {
        return Err((
            HostRefusal::Denied,
            format!("host version {running} is denied for upgrade to Talos {target}"),
        ));
    }
    Ok(())
}

/// go-kubernetes' `Path.IsSupported` (the same minor or the next one), and
/// never down: `to` strictly above `from`.
pub fn kubernetes_step(from: &Version, to: &Version) -> Result<()> {
    if release_cmp(to, from) != Ordering::Greater {
        return Err(Error::refused(format!(
            "Kubernetes never moves down or stays: {} to {}",
            k8s_text(from),
            k8s_text(to)
        )));
    }
    if kubernetes_path_supported(from, to) {
        Ok(())
    } else {
        Err(Error::refused(format!(
            "Kubernetes moves within its minor or to the next one: {} to {} skips a minor",
            k8s_text(from),
            k8s_text(to)
        )))
    }
}

/// go-kubernetes' path rule alone, on minors: `1.X -> 1.X` or `1.X -> 1.(X+1)`.
pub fn kubernetes_path_supported(from: &Version, to: &Version) -> bool {
    from.major == to.major && (to.minor == from.minor || to.minor == from.minor + 1)
}

/// Is `step` valid from `at`? The pair rule, then the step's own rule.
pub fn check_step(matrix: &Matrix, replace: bool, at: &Pair, step: &Step) -> Result<()> {
    matrix
        .check(&step.pair.talos, &step.pair.kubernetes)
        .map_err(Error::refused)?;
    match step.change {
        Change::Talos => {
            if step.pair.kubernetes != at.kubernetes {
                return Err(Error::refused("a Talos step changes Kubernetes"));
            }
            if step.pair.talos == at.talos {
                return Err(Error::refused("a Talos step to the same release"));
            }
            if !replace {
                host_upgrade(matrix, &at.talos, &step.pair.talos)
                    .map_err(|(_, m)| Error::refused(m))?;
            }
            Ok(())
        }
        Change::Kubernetes => {
            if step.pair.talos != at.talos {
                return Err(Error::refused("a Kubernetes step changes Talos"));
            }
            kubernetes_step(&at.kubernetes, &step.pair.kubernetes)
        }
    }
}

fn need_patch(v: &Version, what: &str, example: &str) -> Result<()> {
    if v.patch.is_none() {
        return Err(Error::bad_input(format!(
            "{what}: {v} is a minor; give the running version (e.g. {example})"
        )));
    }
    Ok(())
}

/// Plan the fewest steps. Bad input exit 2; no path exit 1, naming the
/// rule that blocks it.
pub fn plan(matrix: &Matrix, q: &Question) -> Result<Plan> {
    let n = q.names;
    for (v, what) in [
        (q.from_talos, n.from_talos),
        (q.from_kubernetes, n.from_kubernetes),
        (q.to_talos, n.to_talos),
        (q.to_kubernetes, n.to_kubernetes),
    ] {
        if v.trim().is_empty() {
            return Err(Error::bad_input(format!("{what}: required")));
        }
    }
    let from_t = Version::parse_named(q.from_talos, n.from_talos)?;
    let from_k = Version::parse_named(q.from_kubernetes, n.from_kubernetes)?;
    let to_t_asked = Version::parse_named(q.to_talos, n.to_talos)?;
    let to_k_asked = Version::parse_named(q.to_kubernetes, n.to_kubernetes)?;
    need_patch(&from_t, n.from_talos, "v1.11.6")?;
    need_patch(&from_k, n.from_kubernetes, "1.31.4")?;
    let mut notes = Vec::new();
    let to_t = if to_t_asked.patch.is_some() {
        to_t_asked
    } else {
        matrix.entry(&to_t_asked)?;
        let v = matrix.newest_release(&to_t_asked).cloned().ok_or_else(|| {
            Error::refused(format!(
                "{}: the data knows no release of Talos {}; give a full version",
                n.to_talos, to_t_asked
            ))
        })?;
        notes.push(format!(
            "{} {to_t_asked}: its newest stable release {v}",
            n.to_talos
        ));
        v
    };
    let to_k = if to_k_asked.patch.is_some() {
        to_k_asked
    } else {
        let (v, why) = matrix.kubernetes_patch(&to_k_asked, None).ok_or_else(|| {
            Error::refused(format!(
                "{}: the data knows no patch of Kubernetes {}; give a full version",
                n.to_kubernetes, to_k_asked
            ))
        })?;
        notes.push(format!(
            "{} {}: {} ({why})",
            n.to_kubernetes,
            k8s_text(&to_k_asked),
            k8s_text(&v)
        ));
        v
    };
    let from = Pair {
        talos: from_t,
        kubernetes: from_k,
    };
    let to = Pair {
        talos: to_t,
        kubernetes: to_k,
    };
    let pair_text = |p: &Pair| {
        format!(
            "(talos {}, kubernetes {})",
            p.talos,
            k8s_text(&p.kubernetes)
        )
    };
    matrix
        .check(&from.talos, &from.kubernetes)
        .map_err(|e| Error::refused(format!("the starting pair: {e}")))?;
    matrix
        .check(&to.talos, &to.kubernetes)
        .map_err(|e| Error::refused(format!("the target pair: {e}")))?;
    if release_cmp(&to.kubernetes, &from.kubernetes) == Ordering::Less {
        return Err(Error::refused(format!(
            "no path from {} to {}: that is a Kubernetes downgrade, and Kubernetes never moves down",
            pair_text(&from),
            pair_text(&to)
        )));
    }
    if to.kubernetes.major != from.kubernetes.major {
        return Err(Error::refused(format!(
            "no path from {} to {}: Kubernetes moves one minor at a time within its major",
            pair_text(&from),
            pair_text(&to)
        )));
    }
    for t in [&from.talos, &to.talos] {
        if let Some(n) = matrix.pending_note(t)
            && !notes.contains(&n)
        {
            notes.push(n);
        }
    }
    let mut plan = Plan {
        from: from.clone(),
        to: to.clone(),
        replace: q.replace,
        steps: Vec::new(),
        notes,
    };
    if from == to {
        return Ok(plan);
    }
    let graph = Graph::new(matrix, &from, &to);
    match graph.shortest(q.replace) {
        Some(steps) => {
            // Say which releases and patches were chosen on the way.
            plan.notes.extend(on_the_way(matrix, &steps, &to));
            plan.steps = steps;
            Ok(plan)
        }
        None => Err(no_path(
            &graph,
            q.replace,
            &pair_text(&from),
            &pair_text(&to),
        )),
    }
}

/// Which releases and patches a plan's steps chose on the way to `to`.
fn on_the_way(matrix: &Matrix, steps: &[Step], to: &Pair) -> Vec<String> {
    let mut notes = Vec::new();
    for s in steps {
        let p = &s.pair;
        match s.change {
            Change::Talos if p.talos != to.talos => notes.push(format!(
                "Talos {} on the way: its newest stable release {}",
                p.talos.minor_string(),
                p.talos
            )),
            Change::Kubernetes if p.kubernetes != to.kubernetes => {
                let why = matrix
                    .kubernetes_patch(&p.kubernetes, None)
                    .map(|(_, w)| w)
                    .unwrap_or("the data's");
                notes.push(format!(
                    "Kubernetes {} on the way: {} ({why})",
                    p.kubernetes.minor_string().trim_start_matches('v'),
                    k8s_text(&p.kubernetes)
                ))
            }
            _ => {}
        }
    }
    notes
}

/// Why no plan goes from `from` to `to` (in place, and with `--replace`).
fn no_path(graph: &Graph<'_>, replace: bool, from: &str, to: &str) -> Error {
    if !graph.unknown_minors.is_empty() {
        let list = graph.unknown_minors.join(", ");
        return Error::refused(format!(
            "no path from {from} to {to}: the data knows no patch of Kubernetes {list}, and Kubernetes moves one minor at a time (give --matrix a file whose rows name one, e.g. as defaultKubernetes)"
        ));
    }
    let reach = graph.furthest_talos(replace);
    if !replace && let Some(steps) = graph.shortest(true) {
        return Error::refused(format!(
            "no in-place path from {} to {}: the host-upgrade window (each Talos minor takes hosts from its hostUpgrade.from up to below its hostUpgrade.below) stops in-place Talos steps at {reach}; with --replace (machines replaced) the plan has {} step{}",
            from,
            to,
            steps.len(),
            if steps.len() == 1 { "" } else { "s" }
        ));
    }
    Error::refused(format!(
        "no path from {} to {}: every route needs a pair the support matrix refuses (Kubernetes moves one minor at a time, never down; Talos steps reach at most {reach})",
        from, to
    ))
}

/// The finite graph of candidate pairs.
struct Graph<'m> {
    matrix: &'m Matrix,
    talos: Vec<Version>,
    kubernetes: Vec<Version>,
    /// `valid[t][k]`: the matrix accepts the pair.
    valid: Vec<Vec<bool>>,
    start: (usize, usize),
    target: (usize, usize),
    /// Kubernetes minors on the way of which the data knows no patch: no
    /// step can stop there.
    unknown_minors: Vec<String>,
}

fn push_unique(list: &mut Vec<Version>, v: Version) {
    if !list.contains(&v) {
        list.push(v);
    }
}

impl<'m> Graph<'m> {
    fn new(matrix: &'m Matrix, from: &Pair, to: &Pair) -> Graph<'m> {
        let mut talos = vec![from.talos.clone(), to.talos.clone()];
        for e in matrix.entries() {
            if let Some(v) = &e.newest {
                push_unique(&mut talos, v.clone());
            }
        }
        talos.sort_by(release_cmp);
        talos.dedup();
        let mut kubernetes = vec![from.kubernetes.clone(), to.kubernetes.clone()];
        let mut unknown_minors = Vec::new();
        for minor in from.kubernetes.minor..=to.kubernetes.minor {
            let m = Version {
                major: from.kubernetes.major,
                minor,
                patch: None,
                pre: None,
            };
            let between = minor > from.kubernetes.minor && minor < to.kubernetes.minor;
            match matrix.kubernetes_patch(&m, None) {
                Some((v, _))
                    if release_cmp(&v, &from.kubernetes) == Ordering::Greater
                        && release_cmp(&v, &to.kubernetes) == Ordering::Less =>
                {
                    push_unique(&mut kubernetes, v);
                }
                None if between => {
                    unknown_minors.push(format!("{}.{minor}", from.kubernetes.major));
                }
                _ => {}
            }
        }
        kubernetes.sort_by(release_cmp);
        kubernetes.dedup();
        let valid = talos
            .iter()
            .map(|t| {
                kubernetes
                    .iter()
                    .map(|k| matrix.check(t, k).is_ok())
                    .collect()
            })
            .collect();
        let index = |list: &[Version], v: &Version| {
            list.iter()
                .position(|x| x == v)
                .expect("an end is a candidate")
        };
        Graph {
            matrix,
            start: (
                index(&talos, &from.talos),
                index(&kubernetes, &from.kubernetes),
            ),
            target: (index(&talos, &to.talos), index(&kubernetes, &to.kubernetes)),
            talos,
            kubernetes,
            valid,
            unknown_minors,
        }
    }

    /// The moves from `(t, k)`, in the tie-break order: Talos moves by
    /// ascending release, then Kubernetes moves by ascending version.
    fn moves(&self, (t, k): (usize, usize), replace: bool) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for t2 in 0..self.talos.len() {
            if t2 != t
                && self.valid[t2][k]
                && (replace || host_upgrade(self.matrix, &self.talos[t], &self.talos[t2]).is_ok())
            {
                out.push((t2, k));
            }
        }
        for k2 in 0..self.kubernetes.len() {
            if self.valid[t][k2]
                && kubernetes_step(&self.kubernetes[k], &self.kubernetes[k2]).is_ok()
            {
                out.push((t, k2));
            }
        }
        out
    }

    /// Distances to the target (BFS over reversed moves), `None` unreachable.
    fn distances(&self, replace: bool) -> Vec<Vec<Option<usize>>> {
        let (nt, nk) = (self.talos.len(), self.kubernetes.len());
        let mut reverse: Vec<Vec<Vec<(usize, usize)>>> = vec![vec![Vec::new(); nk]; nt];
        for t in 0..nt {
            for k in 0..nk {
                if self.valid[t][k] {
                    for (t2, k2) in self.moves((t, k), replace) {
                        reverse[t2][k2].push((t, k));
                    }
                }
            }
        }
        let mut dist = vec![vec![None; nk]; nt];
        let mut queue = VecDeque::new();
        dist[self.target.0][self.target.1] = Some(0);
        queue.push_back(self.target);
        while let Some((t, k)) = queue.pop_front() {
            let d = dist[t][k].unwrap_or(0);
            for &(pt, pk) in &reverse[t][k] {
                if dist[pt][pk].is_none() {
                    dist[pt][pk] = Some(d + 1);
                    queue.push_back((pt, pk));
                }
            }
        }
        dist
    }

    /// The shortest plan, the first in the tie-break order.
    fn shortest(&self, replace: bool) -> Option<Vec<Step>> {
        let dist = self.distances(replace);
        let mut at = self.start;
        let mut left = dist[at.0][at.1]?;
        let mut steps = Vec::new();
        while left > 0 {
            let next = self
                .moves(at, replace)
                .into_iter()
                .find(|&(t, k)| dist[t][k] == Some(left - 1))?;
            steps.push(Step {
                change: if next.0 != at.0 {
                    Change::Talos
                } else {
                    Change::Kubernetes
                },
                pair: Pair {
                    talos: self.talos[next.0].clone(),
                    kubernetes: self.kubernetes[next.1].clone(),
                },
            });
            at = next;
            left -= 1;
        }
        Some(steps)
    }

    /// The newest Talos release any pair reachable from the start has.
    fn furthest_talos(&self, replace: bool) -> Version {
        let (nt, nk) = (self.talos.len(), self.kubernetes.len());
        let mut seen = vec![vec![false; nk]; nt];
        let mut queue = VecDeque::from([self.start]);
        seen[self.start.0][self.start.1] = true;
        let mut best = self.start.0;
        while let Some(at) = queue.pop_front() {
            best = best.max(at.0);
            for (t, k) in self.moves(at, replace) {
                if !seen[t][k] {
                    seen[t][k] = true;
                    queue.push_back((t, k));
                }
            }
        }
        self.talos[best].clone()
    }
}

/// What `upgrade images` and the mirror config's `upgrades:` add to a plan.
#[derive(Debug, Clone, Default)]
pub struct ImageOptions<'a> {
    pub schematic: Option<&'a str>,
    pub installer_repository: Option<&'a str>,
    pub platform: Option<&'a str>,
    pub optional: bool,
    /// How the image flags are named in messages.
    pub names: crate::pull_list::Names<'a>,
}

/// The pairs of `plan` whose Talos release the image data knows, and a
/// note naming each it does not (a release before the data's first, 1.8.0:
/// its images are not listed, the plan stands).
pub fn imaged_pairs<'p>(matrix: &Matrix, plan: &'p Plan) -> (Vec<&'p Pair>, Vec<String>) {
    let mut known = Vec::new();
    let mut unknown = Vec::new();
    for pair in plan.pairs() {
        match matrix.images().lookup(&pair.talos) {
            Ok(_) => known.push(pair),
            Err(e) => unknown.push(format!(
                "pair (talos {}, kubernetes {}): its images are not listed: {e}",
                pair.talos,
                k8s_text(&pair.kubernetes)
            )),
        }
    }
    (known, unknown)
}

/// Every image any pair of `plan` pulls (the starting pair's too), once
/// each, in the order first met; with the notes of the pull lists, and one
/// naming each pair whose release the image data does not know (skipped,
/// not fatal: [`imaged_pairs`]).
pub fn images(
    matrix: &Matrix,
    plan: &Plan,
    opts: &ImageOptions,
) -> Result<(Vec<Pull>, Vec<String>)> {
    let mut out: Vec<Pull> = Vec::new();
    let (pairs, mut notes) = imaged_pairs(matrix, plan);
    for pair in pairs {
        let talos = pair.talos.to_string();
        let kubernetes = pair.kubernetes.to_string();
        let list = crate::pull_list::plan(
            matrix,
            &PullRequest {
                talos: &talos,
                kubernetes: &kubernetes,
                schematic: opts.schematic,
                installer_repository: opts.installer_repository,
                platform: opts.platform,
                optional: opts.optional,
                names: opts.names,
            },
        )?;
        for n in list.notes {
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
        for p in list.images {
            if !out.iter().any(|o| o.reference == p.reference) {
                out.push(p);
            }
        }
    }
    Ok((out, notes))
}

/// `upgrade images --json`: the plan and each image with its role.
pub fn images_json(plan: &Plan, images: &[Pull]) -> serde_json::Value {
    serde_json::json!({
        "plan": plan.to_json(),
        "images": images.iter().map(|p| serde_json::json!({
            "image": p.reference,
            "role": p.role.name(),
            "for": p.role.purpose(),
            "optional": p.role.optional(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q<'a>(ft: &'a str, fk: &'a str, tt: &'a str, tk: &'a str) -> Question<'a> {
        Question {
            from_talos: ft,
            from_kubernetes: fk,
            to_talos: tt,
            to_kubernetes: tk,
            ..Default::default()
        }
    }

    fn m() -> &'static Matrix {
        Matrix::embedded()
    }

    #[test]
    fn the_issue_example() {
        let p = plan(m(), &q("v1.11.6", "1.31.4", "v1.14.6", "1.36.3")).unwrap();
        assert_eq!(
            p.to_text(),
            "1. talos v1.12.11 (leaves talos v1.12.11, kubernetes 1.31.4)\n\
             2. kubernetes 1.32.13 (leaves talos v1.12.11, kubernetes 1.32.13)\n\
             3. talos v1.14.6 (leaves talos v1.14.6, kubernetes 1.32.13)\n\
             4. kubernetes 1.33.13 (leaves talos v1.14.6, kubernetes 1.33.13)\n\
             5. kubernetes 1.34.9 (leaves talos v1.14.6, kubernetes 1.34.9)\n\
             6. kubernetes 1.35.6 (leaves talos v1.14.6, kubernetes 1.35.6)\n\
             7. kubernetes 1.36.3 (leaves talos v1.14.6, kubernetes 1.36.3)\n"
        );
        let j = p.to_json();
        assert_eq!(j["from"]["talos"], "v1.11.6");
        assert_eq!(j["from"]["kubernetes"], "1.31.4");
        assert_eq!(j["replace"], false);
        assert_eq!(j["steps"][0]["change"], "talos");
        assert_eq!(j["steps"][6]["kubernetes"], "1.36.3");
        assert!(
            p.notes.iter().any(|n| n.contains("v1.12.11")),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn equal_bare_and_blocked() {
        let p = plan(m(), &q("v1.13.9", "1.35.6", "v1.13.9", "1.35.6")).unwrap();
        assert!(p.steps.is_empty());
        let p = plan(m(), &q("v1.13.9", "1.35.6", "1.14", "1.35")).unwrap();
        assert_eq!(p.to.talos.to_string(), "v1.14.6");
        assert_eq!(p.to.kubernetes.to_string(), "v1.35.6");
        assert_eq!(p.steps.len(), 1);
        assert_eq!(p.notes.len(), 2, "{:?}", p.notes);
        // Kubernetes downgrade
        let e = plan(m(), &q("v1.13.9", "1.35.6", "v1.13.9", "1.34.1")).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().contains("Kubernetes downgrade"), "{e}");
        // a pair the matrix refuses
        let e = plan(m(), &q("v1.13.9", "1.35.6", "v1.9.6", "1.35.6")).unwrap_err();
        assert!(e.to_string().starts_with("the target pair: "), "{e}");
        // Talos may go down in place too, one window at a time: 1.9 takes
        // hosts below 1.11.0, so 1.14.6 walks down minor by minor; replaced
        // machines take one step.
        let p = plan(m(), &q("v1.14.6", "1.32.13", "v1.9.6", "1.32.13")).unwrap();
        assert_eq!(p.steps.len(), 5, "{}", p.to_text());
        let p = plan(
            m(),
            &Question {
                replace: true,
                ..q("v1.14.6", "1.32.13", "v1.9.6", "1.32.13")
            },
        )
        .unwrap();
        assert_eq!(p.steps.len(), 1);
        // the host window blocks: Talos 1.1 records none (no talos11
        // package: Talos refuses upgrades to it); --replace reaches it.
        let e = plan(m(), &q("v1.0.6", "1.23.6", "v1.1.2", "1.23.6")).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().contains("host-upgrade window"), "{e}");
        assert!(e.to_string().ends_with("the plan has 1 step"), "{e}");
        // bad input
        for bad in [
            q("x", "1.31.4", "v1.14.6", "1.36.3"),
            q("v1.11", "1.31.4", "v1.14.6", "1.36.3"),
            q("v1.11.6", "1.31", "v1.14.6", "1.36.3"),
            q("v1.11.6", "1.31.4", "", "1.36.3"),
        ] {
            assert_eq!(plan(m(), &bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn denied_host_versions_are_never_stepped_from() {
        let text = "talos:\n  - talos: \"1.98\"\n    kubernetes: {min: \"1.40.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.41.0\", latest: \"1.41.2\"}\n    newest: \"1.98.4\"\n  - talos: \"1.99\"\n    kubernetes: {min: \"1.40.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.41.0\", latest: \"1.41.2\"}\n    newest: \"1.99.2\"\n    hostUpgrade: {from: \"1.98.0\", below: \"1.100.0\", denied: [\"1.98.3\"]}\n";
        let mx = Matrix::from_yaml(text, "t").unwrap();
        let v = |s: &str| Version::parse(s).unwrap();
        assert_eq!(
            host_upgrade(&mx, &v("1.98.3"), &v("1.99.2")).unwrap_err().0,
            HostRefusal::Denied
        );
        assert!(host_upgrade(&mx, &v("1.98.4"), &v("1.99.2")).is_ok());
        // 1.98.3 steps to 1.98.4 first (1.98 has no window: only by replace,
        // so in place there is no path at all)
        let e = plan(&mx, &q("1.98.3", "1.41.0", "1.99.2", "1.41.0")).unwrap_err();
        assert!(e.to_string().contains("host-upgrade window"), "{e}");
        let p = plan(&mx, &q("1.98.4", "1.41.0", "1.99.2", "1.41.0")).unwrap();
        assert_eq!(p.steps.len(), 1);
    }
}
