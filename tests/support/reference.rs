//! The reference data in `../shared` beside the repository.

use std::path::PathBuf;

/// `../shared` beside the repository (or `TALOS_GEN_REFERENCE_DIR`). When it
/// is absent the test says so and is skipped (`None`), unless
/// `TALOS_GEN_REQUIRE_REFERENCE=1`, which makes it fail instead (CI sets it).
pub fn reference_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("TALOS_GEN_REFERENCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    if dir.join("spec").is_dir() {
        return Some(dir);
    }
    if std::env::var("TALOS_GEN_REQUIRE_REFERENCE").as_deref() == Ok("1") {
        panic!(
            "reference data not found at {} (set TALOS_GEN_REFERENCE_DIR); TALOS_GEN_REQUIRE_REFERENCE=1 forbids skipping",
            dir.display()
        );
    }
    super::skip(&format!("reference data not found at {}", dir.display()));
    None
}

/// The golden `overrides` inputs that have no talos-gen flag of their own
/// (install kernel args, sysctls, the CNI; `talos-golden/SOURCE.txt`),
/// written as a config patch.
pub const OVERRIDES_PATCH: &str = "\
machine:
  install:
    extraKernelArgs: [foo=bar, bar=baz]
  sysctls:
    foo: bar
cluster:
  network:
    cni:
      name: custom
      urls: [https://example.com/cni.yaml]
";
