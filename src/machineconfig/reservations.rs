//! Kubelet reservations, eviction thresholds and autoscaler capacity for a
//! node group, computed exactly as the Cozystack `kubernetes-nodes` chart
//! does (`templates/nodegroup.yaml`), with its messages.

use serde::Serialize;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::error::{Error, Result};
use crate::goyaml::{Map, Node};

use super::instancetypes;
use super::quantity::{
    cpu_millis_f, cpu_millis_int, go_g, is_cpu, is_decimal, is_memory, to_float,
};

/// Declares [`Sizing`] from one list of its fields: the struct, [`KEYS`],
/// `from_array` and `fields` can't fall out of step.
macro_rules! sizing {
    ($($(#[doc = $doc:literal])* $field:ident: $key:literal,)*) => {
        /// One node group's sizing: an instance type, its resources and the
        /// six kubelet overrides, each as typed (an empty text counts as not
        /// given). The same shape names each value ([`Names`]). The flags,
        /// the HTTP bodies (see its `Deserialize`) and the chart's values
        /// all give one.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Sizing<T = Option<String>> {
            $($(#[doc = $doc])* pub $field: T,)*
        }

        /// The chart's keys of a [`Sizing`], in the order of [`Sizing::fields`].
        pub const KEYS: [&str; 9] = [$($key),*];

        impl<T> Sizing<T> {
            /// One value per field, in [`KEYS`] order.
            pub fn from_array(a: [T; 9]) -> Sizing<T> {
                let [$($field),*] = a;
                Sizing { $($field),* }
            }

            /// The fields, in [`KEYS`] order.
            pub fn fields(&self) -> [&T; 9] {
                [$(&self.$field),*]
            }
        }
    };
}

sizing! {
    instance_type: "instanceType",
    /// `resources.cpu`
    cpu: "cpu",
    /// `resources.memory`
    memory: "memory",
    system_reserved_memory: "systemReservedMemory",
    kube_reserved_memory: "kubeReservedMemory",
    system_reserved_cpu: "systemReservedCpu",
    kube_reserved_cpu: "kubeReservedCpu",
    eviction_hard_memory: "evictionHardMemory",
    eviction_soft_memory: "evictionSoftMemory",
}

impl<T> Sizing<T> {
    /// Each field from its chart key.
    pub fn from_keys(f: impl FnMut(&'static str) -> T) -> Sizing<T> {
        Sizing::from_array(KEYS.map(f))
    }
}

/// A body's sizing fields (the JSON or YAML body of `kubelet-reservations`,
/// and flattened into `machineconfig`'s): each the text as given, a number
/// or bool taken as its text (`cpu: 2` is `"2"`, as the chart's `toString`
/// would), null as not given. Anything else, an unknown key or a key given
/// twice is an error naming the key. Written by hand, not derived: a
/// flattened field reaches serde's derive as an already-parsed number, which
/// a derived `Option<String>` refuses without naming the field.
impl<'de> Deserialize<'de> for Sizing {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Sizing, D::Error> {
        d.deserialize_struct("Sizing", &KEYS, SizingVisitor)
    }
}

struct SizingVisitor;

impl<'de> Visitor<'de> for SizingVisitor {
    type Value = Sizing;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<Sizing, A::Error> {
        let mut given: [Option<Option<String>>; 9] = Default::default();
        while let Some(key) = m.next_key::<String>()? {
            let Some(i) = KEYS.iter().position(|k| *k == key) else {
                return Err(de::Error::unknown_field(&key, &KEYS));
            };
            if given[i].is_some() {
                return Err(de::Error::duplicate_field(KEYS[i]));
            }
            given[i] = Some(match m.next_value::<Given>()? {
                Given::Text(t) => t,
                Given::Not(what) => {
                    return Err(de::Error::custom(format!(
                        "{key}: expected a quantity (text or a number), got {what}"
                    )));
                }
            });
        }
        Ok(Sizing::from_array(given.map(Option::flatten)))
    }
}

/// One sizing value: its text (`None`: null), or what it was instead.
enum Given {
    Text(Option<String>),
    Not(&'static str),
}

impl<'de> Deserialize<'de> for Given {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Given, D::Error> {
        d.deserialize_any(GivenVisitor)
    }
}

struct GivenVisitor;

impl<'de> Visitor<'de> for GivenVisitor {
    type Value = Given;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("text or a number")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Given, E> {
        Ok(Given::Text(Some(v.to_string())))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Given, E> {
        Ok(Given::Text(Some(v.to_string())))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Given, E> {
        Ok(Given::Text(Some(v.to_string())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Given, E> {
        Ok(Given::Text(Some(v.to_string())))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Given, E> {
        Ok(Given::Text(Some(v.to_string())))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Given, E> {
        Ok(Given::Text(None))
    }
    fn visit_none<E: de::Error>(self) -> std::result::Result<Given, E> {
        Ok(Given::Text(None))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Given, D::Error> {
        Given::deserialize(d)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> std::result::Result<Given, A::Error> {
        while a.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Given::Not("a list"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> std::result::Result<Given, A::Error> {
        while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Given::Not("a mapping"))
    }
}

/// The name each value is reported under: as the user typed it (a flag) or
/// the chart's key.
pub type Names = Sizing<String>;

impl Names {
    /// The chart's keys (`resources.cpu`, `systemReservedMemory`, ...).
    pub fn chart() -> Names {
        Sizing::from_keys(|k| match k {
            "cpu" | "memory" => format!("resources.{k}"),
            k => k.to_string(),
        })
    }

    /// The command-line flags (`--cpu`, `--system-reserved-memory`, ...).
    pub fn flags() -> Names {
        Sizing::from_keys(|k| {
            let mut flag = String::from("--");
            for c in k.chars() {
                if c.is_ascii_uppercase() {
                    flag.push('-');
                }
                flag.push(c.to_ascii_lowercase());
            }
            flag
        })
    }
}

/// What [`compute`] is given: the values and the name of each.
#[derive(Debug, Clone)]
pub struct Input {
    pub given: Sizing,
    pub names: Names,
}

impl Default for Input {
    /// Nothing given; named by the chart's keys.
    fn default() -> Input {
        Input {
            given: Sizing::default(),
            names: Names::chart(),
        }
    }
}

/// What the node group gets. The capacity fields are empty when neither
/// resources nor an instance type size the node (the chart renders no
/// annotation then).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservations {
    pub system_reserved_memory: String,
    pub kube_reserved_memory: String,
    pub system_reserved_cpu: String,
    pub kube_reserved_cpu: String,
    pub eviction_hard_memory: String,
    pub eviction_soft_memory: String,
    pub capacity_memory: String,
    pub capacity_cpu: String,
}

fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|s| !s.is_empty())
}

const MEMORY_HINT: &str = "a valid Kubernetes memory quantity (e.g. 128Mi, 1Gi, 1e9, 500e6)";
const CPU_HINT: &str =
    "a valid Kubernetes CPU quantity (integer millicores like 100m, or decimal cores like 0.5, 1)";

fn is_pct_number(s: &str) -> bool {
    is_decimal(s.strip_prefix('-').unwrap_or(s))
}

/// How the chart words its failures: `prefix` (the chart writes
/// `nodeGroup <name>: `) before every message, a bad value as bad input, an
/// impossible combination as refused; a value's form (a CPU or memory
/// quantity), then that it is above zero.
struct Checks<'a> {
    prefix: &'a str,
}

impl Checks<'_> {
    fn bad(&self, m: String) -> Error {
        Error::bad_input(format!("{}{m}", self.prefix))
    }

    fn refuse(&self, m: String) -> Error {
        Error::refused(format!("{}{m}", self.prefix))
    }

    fn form(&self, key: &str, v: &str, mem: bool) -> Result<()> {
        let (ok, hint) = if mem {
            (is_memory(v), MEMORY_HINT)
        } else {
            (is_cpu(v), CPU_HINT)
        };
        match ok {
            true => Ok(()),
            false => Err(self.bad(format!("invalid {key} value {v:?} — must be {hint}"))),
        }
    }

    fn positive(&self, key: &str, v: &str, mem: bool) -> Result<()> {
        let amount = if mem { to_float(v) } else { cpu_millis_f(v) };
        match amount > 0.0 {
            true => Ok(()),
            false => Err(self.bad(format!("{key} must be a positive value, got {v}"))),
        }
    }
}

/// Compute the reservations; `prefix` starts every message (the chart
/// writes `nodeGroup <name>: `). The checks run in the chart's order.
pub fn compute(input: &Input, prefix: &str) -> Result<Reservations> {
    let ck = Checks { prefix };
    let (g, n) = (&input.given, &input.names);
    let (effective_memory, effective_cpu) = effective_resources(input, &ck)?;

    let mut auto_mi: i64 = 256;
    if let Some(m) = &effective_memory {
        let mi = (to_float(m) / 1048576.0) as i64;
        let five = (mi as f64 * 0.05) as i64;
        auto_mi = five.clamp(256, 1024);
    }
    let mut auto_millis: i64 = 50;
    if let Some(c) = &effective_cpu {
        let millis = cpu_millis_int(c);
        let five = (millis as f64 * 0.05) as i64;
        auto_millis = five.clamp(50, 500);
    }
    let or_auto = |v: &Option<String>, auto: String| given(v).map(str::to_string).unwrap_or(auto);
    let sys_mem = or_auto(&g.system_reserved_memory, format!("{auto_mi}Mi"));
    let kube_mem = or_auto(&g.kube_reserved_memory, format!("{auto_mi}Mi"));
    let sys_cpu = or_auto(&g.system_reserved_cpu, format!("{auto_millis}m"));
    let kube_cpu = or_auto(&g.kube_reserved_cpu, format!("{auto_millis}m"));
    let hard = given(&g.eviction_hard_memory).unwrap_or("7%").to_string();
    let soft = given(&g.eviction_soft_memory).unwrap_or("10%").to_string();

    // The chart's order: every override's form, then that each is above
    // zero; the eviction thresholds' form, then (percentages) their range.
    let overrides = [
        (&n.system_reserved_memory, &g.system_reserved_memory, true),
        (&n.kube_reserved_memory, &g.kube_reserved_memory, true),
        (&n.system_reserved_cpu, &g.system_reserved_cpu, false),
        (&n.kube_reserved_cpu, &g.kube_reserved_cpu, false),
    ];
    for (key, value, mem) in overrides {
        if let Some(v) = given(value) {
            ck.form(key, v, mem)?;
        }
    }
    for (key, value, mem) in overrides {
        if let Some(v) = given(value) {
            ck.positive(key, v, mem)?;
        }
    }
    check_thresholds(&hard, &soft, n, &ck)?;

    let mut hard_bytes = 0.0;
    if let Some(m) = &effective_memory {
        hard_bytes = match hard.strip_suffix('%') {
            Some(p) => to_float(m) * (p.parse::<f64>().unwrap_or(0.0) / 100.0),
            None => to_float(&hard),
        };
    }
    let mut capacity_memory = String::new();
    if let Some(m) = &effective_memory {
        let total = to_float(&sys_mem) + to_float(&kube_mem) + hard_bytes;
        let eff = to_float(m);
        if total >= eff {
            return Err(ck.refuse(format!(
                "total reserved memory (systemReservedMemory={sys_mem} + kubeReservedMemory={kube_mem} + evictionHardMemory={hard}) must be less than effective node memory ({m})"
            )));
        }
        capacity_memory = format!("{}Mi", go_g(((eff - total) / 1048576.0).floor()));
    }
    let mut capacity_cpu = String::new();
    if let Some(c) = &effective_cpu {
        let total = cpu_millis_f(&sys_cpu) + cpu_millis_f(&kube_cpu);
        let eff = cpu_millis_int(c) as f64;
        if total >= eff {
            return Err(ck.refuse(format!(
                "total reserved CPU (systemReservedCpu={sys_cpu} + kubeReservedCpu={kube_cpu}) must be less than effective node CPU ({c} cores)"
            )));
        }
        capacity_cpu = format!("{}m", (eff - total).ceil() as i64);
    }
    if effective_memory.is_none()
        && [
            &g.system_reserved_memory,
            &g.kube_reserved_memory,
            &g.eviction_hard_memory,
            &g.eviction_soft_memory,
        ]
        .iter()
        .any(|v| given(v).is_some())
    {
        return Err(ck.refuse(
            "kubelet memory reservations require effective memory to validate — set resources.memory or instanceType".into(),
        ));
    }
    if effective_cpu.is_none()
        && [&g.system_reserved_cpu, &g.kube_reserved_cpu]
            .iter()
            .any(|v| given(v).is_some())
    {
        return Err(ck.refuse(
            "cannot validate kubelet CPU reservations without effective CPU — set resources.cpu or a valid instanceType".into(),
        ));
    }
    Ok(Reservations {
        system_reserved_memory: sys_mem,
        kube_reserved_memory: kube_mem,
        system_reserved_cpu: sys_cpu,
        kube_reserved_cpu: kube_cpu,
        eviction_hard_memory: hard,
        eviction_soft_memory: soft,
        capacity_memory,
        capacity_cpu,
    })
}

/// The node's memory and CPU: `resources` when given, else the instance
/// type's (both or neither with an instance type), each checked.
fn effective_resources(input: &Input, ck: &Checks) -> Result<(Option<String>, Option<String>)> {
    let (g, n) = (&input.given, &input.names);
    let has_cpu = given(&g.cpu).is_some();
    let has_mem = given(&g.memory).is_some();
    let itype = given(&g.instance_type);
    if itype.is_some() && has_cpu != has_mem {
        return Err(ck.bad(format!("set both {} and {}, or neither", n.cpu, n.memory)));
    }
    for (key, value, mem) in [(&n.cpu, &g.cpu, false), (&n.memory, &g.memory, true)] {
        if let Some(v) = given(value) {
            ck.form(key, v, mem)?;
            ck.positive(key, v, mem)?;
        }
    }
    let mut sized = None;
    if let Some(t) = itype
        && !(has_cpu && has_mem)
    {
        match instancetypes::lookup(t) {
            Some(x) => sized = Some(x),
            None => {
                return Err(ck.bad(format!(
                    "specified instanceType {t:?} not found in cluster (nearest known: {}; `talos-gen kubelet-reservations --help` lists all)",
                    instancetypes::nearest(t, 3).join(", ")
                )));
            }
        }
    }
    let memory = given(&g.memory)
        .map(str::to_string)
        .or_else(|| sized.as_ref().map(|(_, m)| m.clone()));
    let cpu = given(&g.cpu)
        .map(str::to_string)
        .or_else(|| sized.as_ref().map(|(c, _)| c.to_string()));
    Ok((memory, cpu))
}

/// The eviction thresholds: each a percentage or a memory quantity,
/// percentages in (0, 100], both of one unit, hard below soft.
fn check_thresholds(hard: &str, soft: &str, n: &Names, ck: &Checks) -> Result<()> {
    let thresholds = [
        (hard, &n.eviction_hard_memory, "7%"),
        (soft, &n.eviction_soft_memory, "10%"),
    ];
    for (value, key, example) in thresholds {
        if !value.ends_with('%') && !is_memory(value) {
            return Err(ck.bad(format!(
                "invalid {key} value {value:?} — must be a percentage (e.g. {example}) or a valid Kubernetes memory quantity (e.g. 500Mi, 1Gi, 1e9)"
            )));
        }
    }
    match (hard.strip_suffix('%'), soft.strip_suffix('%')) {
        (Some(h), Some(s)) => {
            let percents = [(h, &n.eviction_hard_memory), (s, &n.eviction_soft_memory)];
            for (p, key) in percents {
                if !is_pct_number(p) {
                    return Err(ck.bad(format!(
                        "{key} percentage value {p:?} is not a valid number"
                    )));
                }
            }
            for (p, key) in percents {
                let pct: f64 = p.parse().unwrap_or(0.0);
                if pct <= 0.0 || pct > 100.0 {
                    return Err(ck.bad(format!(
                        "{key}: the eviction threshold must be a percentage in (0, 100], got {p}%"
                    )));
                }
            }
            let (hp, sp): (f64, f64) = (h.parse().unwrap_or(0.0), s.parse().unwrap_or(0.0));
            if hp >= sp {
                return Err(ck.refuse(format!(
                    "evictionHardMemory ({hard}) must be strictly less than evictionSoftMemory ({soft})"
                )));
            }
        }
        (None, None) => {
            if to_float(hard) >= to_float(soft) {
                return Err(ck.refuse(format!(
                    "evictionHardMemory ({hard}) must be strictly less than evictionSoftMemory ({soft})"
                )));
            }
        }
        _ => {
            return Err(ck.refuse(format!(
                "evictionHardMemory ({hard}) and evictionSoftMemory ({soft}) must use the same unit type (both percentage or both absolute)"
            )));
        }
    }

    Ok(())
}

impl Reservations {
    /// The kubelet `extraConfig` the chart renders.
    pub fn kubelet_extra_config(&self) -> Node {
        Map::new()
            .field(
                "systemReserved",
                Map::new()
                    .field("cpu", self.system_reserved_cpu.as_str())
                    .field("memory", self.system_reserved_memory.as_str()),
            )
            .field(
                "kubeReserved",
                Map::new()
                    .field("cpu", self.kube_reserved_cpu.as_str())
                    .field("memory", self.kube_reserved_memory.as_str()),
            )
            .field(
                "evictionHard",
                Map::new()
                    .field("memory.available", self.eviction_hard_memory.as_str())
                    .field("nodefs.available", "10%")
                    .field("imagefs.available", "15%")
                    .field("nodefs.inodesFree", "5%"),
            )
            .field(
                "evictionSoft",
                Map::new()
                    .field("memory.available", self.eviction_soft_memory.as_str())
                    .field("nodefs.available", "15%")
                    .field("imagefs.available", "20%"),
            )
            .field(
                "evictionSoftGracePeriod",
                Map::new()
                    .field("memory.available", "1m30s")
                    .field("nodefs.available", "1m30s")
                    .field("imagefs.available", "1m30s"),
            )
            .field(
                "evictionMinimumReclaim",
                Map::new().field("memory.available", "256Mi"),
            )
            .into()
    }

    /// Human-readable lines for the CLI.
    pub fn to_text(&self) -> String {
        let cap = |s: &str| {
            if s.is_empty() {
                "(not rendered: no size known)".to_string()
            } else {
                s.to_string()
            }
        };
        format!(
            "systemReservedMemory: {}\nkubeReservedMemory: {}\nsystemReservedCpu: {}\nkubeReservedCpu: {}\nevictionHardMemory: {}\nevictionSoftMemory: {}\ncapacity.cluster-autoscaler.kubernetes.io/memory: {}\ncapacity.cluster-autoscaler.kubernetes.io/cpu: {}\n",
            self.system_reserved_memory,
            self.kube_reserved_memory,
            self.system_reserved_cpu,
            self.kube_reserved_cpu,
            self.eviction_hard_memory,
            self.eviction_soft_memory,
            cap(&self.capacity_memory),
            cap(&self.capacity_cpu),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_keys() {
        // serde's camelCase names are the keys.
        let all: String = KEYS.iter().map(|k| format!("\"{k}\":\"{k}\",")).collect();
        let s: Sizing =
            serde_json::from_str(&format!("{{{}}}", all.trim_end_matches(','))).unwrap();
        for (k, v) in KEYS.iter().zip(s.fields()) {
            assert_eq!(v.as_deref(), Some(*k));
        }
        let flags = Names::flags();
        assert_eq!(flags.instance_type, "--instance-type");
        assert_eq!(flags.cpu, "--cpu");
        assert_eq!(flags.system_reserved_memory, "--system-reserved-memory");
        assert_eq!(flags.eviction_soft_memory, "--eviction-soft-memory");
        let chart = Names::chart();
        assert_eq!(chart.memory, "resources.memory");
        assert_eq!(chart.kube_reserved_cpu, "kubeReservedCpu");
    }

    #[test]
    fn worked_example() {
        let r = compute(
            &Input {
                given: Sizing {
                    instance_type: Some("u1.medium".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            "",
        )
        .unwrap();
        assert_eq!(r.system_reserved_memory, "256Mi");
        assert_eq!(r.kube_reserved_memory, "256Mi");
        assert_eq!(r.system_reserved_cpu, "50m");
        assert_eq!(r.kube_reserved_cpu, "50m");
        assert_eq!(r.capacity_memory, "3297Mi");
        assert_eq!(r.capacity_cpu, "900m");
    }
}
