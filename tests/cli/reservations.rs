//! `talos-gen kubelet-reservations`: the chart's arithmetic on hand-computed
//! cases across the instance-type table, the contract's JSON fields, and the
//! chart's refusals with their exit codes.

use crate::support;

use serde_json::Value;

fn reservations(args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["kubelet-reservations", "--json"];
    all.extend_from_slice(args);
    let out = support::run(&all, None);
    let code = out.status.code().unwrap_or(-1);
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (code, json, support::stderr(&out))
}

/// (args, then what it answers: sys/kube memory, sys/kube cpu, hard and soft
/// eviction, capacity memory, capacity cpu)
const CASES: &[(&[&str], &str)] = &[
    // The worked example: 4096Mi * 5% = 204 -> 256 floor; 1000m * 5% = 50.
    // 4Gi - 512Mi - 7% of 4Gi = 3297.28Mi -> 3297Mi; 1000 - 100 = 900m.
    (
        &["--instance-type", "u1.medium"],
        "256Mi 50m 7% 10% 3297Mi 900m",
    ),
    // 1Gi: 1024 - 512 - 71.68 = 440.32 -> 440Mi.
    (
        &["--instance-type", "u1.micro"],
        "256Mi 50m 7% 10% 440Mi 900m",
    ),
    // 16Gi: 16384 * 5% = 819.2 -> 819Mi; 4000m -> 200m.
    // 16384 - 1638 - 1146.88 = 13599.12 -> 13599Mi; 4000 - 400 = 3600m.
    (
        &["--instance-type", "u1.xlarge"],
        "819Mi 200m 7% 10% 13599Mi 3600m",
    ),
    // Same memory, 8 vCPU: 400m each, 8000 - 800.
    (
        &["--instance-type", "cx1.2xlarge"],
        "819Mi 400m 7% 10% 13599Mi 7200m",
    ),
    (
        &["--instance-type", "cx1.2xlarge1gi"],
        "819Mi 400m 7% 10% 13599Mi 7200m",
    ),
    // 256Gi, 32 vCPU: both clamp (1024Mi, 500m).
    // 262144 - 2048 - 18350.08 = 241745.92 -> 241745Mi; 32000 - 1000.
    (
        &["--instance-type", "m1.8xlarge"],
        "1024Mi 500m 7% 10% 241745Mi 31000m",
    ),
    // 128Gi, 64 vCPU: 131072 - 2048 - 9175.04 = 119848.96 -> 119848Mi.
    (
        &["--instance-type", "n1.8xlarge"],
        "1024Mi 500m 7% 10% 119848Mi 63000m",
    ),
    // 20Gi is where the 1Gi ceiling starts: 20480 * 5% = 1024.
    // 20480 - 2048 - 1433.6 = 16998.4 -> 16998Mi; 1.5 cores -> 75m.
    (
        &["--memory", "20Gi", "--cpu", "1.5"],
        "1024Mi 75m 7% 10% 16998Mi 1350m",
    ),
    // The seed's override example on u1.large (2 vCPU, 8Gi):
    // 8192 - 256 - 256 - 500 = 7180Mi; 2000m -> 100m each, 1800m left.
    (
        &[
            "--instance-type",
            "u1.large",
            "--system-reserved-memory",
            "256Mi",
            "--kube-reserved-memory",
            "256Mi",
            "--eviction-hard-memory",
            "500Mi",
            "--eviction-soft-memory",
            "1Gi",
        ],
        "256Mi 100m 500Mi 1Gi 7180Mi 1800m",
    ),
    // Explicit resources win over the instance type: 6Gi -> 307Mi, 1500m -> 75m.
    // 6144 - 614 - 430.08 = 5099.92 -> 5099Mi.
    (
        &[
            "--instance-type",
            "u1.nano",
            "--memory",
            "6Gi",
            "--cpu",
            "1500m",
        ],
        "307Mi 75m 7% 10% 5099Mi 1350m",
    ),
];

#[test]
fn hand_computed_cases() {
    for (args, want) in CASES {
        let want: Vec<&str> = want.split_whitespace().collect();
        let [mem, cpu, hard, soft, cap_mem, cap_cpu] = want[..] else {
            panic!("{args:?}: six answers, not {want:?}");
        };
        let (code, j, err) = reservations(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let f = |k: &str| j[k].as_str().unwrap_or("<missing>").to_string();
        assert_eq!(f("systemReservedMemory"), mem, "{args:?}");
        if !args.contains(&"--kube-reserved-memory") {
            assert_eq!(f("kubeReservedMemory"), mem, "{args:?}");
        }
        assert_eq!(f("systemReservedCpu"), cpu, "{args:?}");
        assert_eq!(f("kubeReservedCpu"), cpu, "{args:?}");
        assert_eq!(f("evictionHardMemory"), hard, "{args:?}");
        assert_eq!(f("evictionSoftMemory"), soft, "{args:?}");
        assert_eq!(f("capacityMemory"), cap_mem, "{args:?}");
        assert_eq!(f("capacityCpu"), cap_cpu, "{args:?}");
    }
}

#[test]
fn json_has_exactly_the_contract_fields() {
    let (code, j, _) = reservations(&["--instance-type", "u1.medium"]);
    assert_eq!(code, 0);
    let mut keys: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "capacityCpu",
            "capacityMemory",
            "evictionHardMemory",
            "evictionSoftMemory",
            "kubeReservedCpu",
            "kubeReservedMemory",
            "systemReservedCpu",
            "systemReservedMemory"
        ]
    );
    assert!(j.as_object().unwrap().values().all(Value::is_string));
}

#[test]
fn every_instance_type_fits_except_the_nano_ones() {
    // 512Mi cannot hold 256Mi + 256Mi + 7%; every larger type can.
    let names = talos_gen::machineconfig::instancetypes::all();
    assert_eq!(names.len(), 69);
    for name in names {
        let (code, _, err) = reservations(&["--instance-type", &name]);
        if name.ends_with(".nano") {
            assert_eq!(code, 1, "{name}");
            assert!(
                err.contains(
                    "total reserved memory (systemReservedMemory=256Mi + kubeReservedMemory=256Mi + evictionHardMemory=7%) must be less than effective node memory (512Mi)"
                ),
                "{name}: {err}"
            );
        } else {
            assert_eq!(code, 0, "{name}: {err}");
        }
    }
}

#[test]
fn the_instance_table_matches_the_seed() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let seed = std::fs::read_to_string(shared.join("seeds/001_54ed077789124dec.txt")).unwrap();
    let mut seen = 0;
    for line in seed.lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() == 3 && cols[0].contains('.') && cols[1].parse::<u32>().is_ok() {
            let got = talos_gen::machineconfig::instancetypes::lookup(cols[0]);
            assert_eq!(
                got,
                Some((cols[1].parse().unwrap(), cols[2].to_string())),
                "{line}"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 69);
}

#[test]
fn refusals_and_bad_input_use_the_contract_codes() {
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &[
                "--instance-type",
                "u1.medium",
                "--eviction-hard-memory",
                "10%",
            ],
            1,
            "evictionHardMemory (10%) must be strictly less than evictionSoftMemory (10%)",
        ),
        (
            &[
                "--instance-type",
                "u1.medium",
                "--eviction-hard-memory",
                "1Gi",
            ],
            1,
            "evictionHardMemory (1Gi) and evictionSoftMemory (10%) must use the same unit type (both percentage or both absolute)",
        ),
        (
            &[
                "--instance-type",
                "u1.medium",
                "--eviction-hard-memory",
                "1Gi",
                "--eviction-soft-memory",
                "200Mi",
            ],
            1,
            "evictionHardMemory (1Gi) must be strictly less than evictionSoftMemory (200Mi)",
        ),
        (
            &["--instance-type", "u1.medium", "--system-reserved-cpu", "1"],
            1,
            "total reserved CPU (systemReservedCpu=1 + kubeReservedCpu=50m) must be less than effective node CPU (1 cores)",
        ),
        (
            &[
                "--instance-type",
                "u1.medium",
                "--kube-reserved-memory",
                "4GB",
            ],
            2,
            "invalid --kube-reserved-memory value \"4GB\"",
        ),
        (
            &[
                "--instance-type",
                "u1.medium",
                "--system-reserved-memory",
                "0",
            ],
            2,
            "--system-reserved-memory must be a positive value, got 0",
        ),
        (
            &[
                "--instance-type",
                "u1.medium",
                "--eviction-soft-memory",
                "120%",
            ],
            2,
            "--eviction-soft-memory: the eviction threshold must be a percentage in (0, 100], got 120%",
        ),
        (
            &["--instance-type", "u9.huge"],
            2,
            "specified instanceType \"u9.huge\" not found in cluster",
        ),
        (
            &["--memory", "4Gi"],
            2,
            "--memory 4Gi without --cpu: give both",
        ),
        (
            &["--memory", "lots", "--cpu", "1"],
            2,
            "invalid --memory value",
        ),
    ];
    for (args, want, msg) in cases {
        let (code, _, err) = reservations(args);
        assert_eq!(code, *want, "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}
