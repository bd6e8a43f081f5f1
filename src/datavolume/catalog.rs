//! `talos-gen datavolume catalog`: the values of Cozystack's worker image
//! catalog (`kubernetes-worker-image`'s `images[]`) for every (schematic,
//! release) an upgrade plan or a mirror config passes through, with
//! `imageFactoryURL` on talos-gen. Each entry is checked as the catalog's
//! template checks it ([`cozystack::render`]): what it would refuse at
//! render time is refused here, naming the entry.

use crate::error::{Error, Result};
use crate::goyaml::Node;
use crate::upgrade::Plan;

use super::cozystack::{self, Defaults, Entry};

/// The (schematic, release) of every pair of `plan` (the starting pair's
/// too), once each, in the order first met.
pub fn pairs_of_plan(plan: &Plan, schematic: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for p in plan.pairs() {
        let pair = (schematic.to_string(), p.talos.to_string());
        if !out.contains(&pair) {
            out.push(pair);
        }
    }
    out
}

/// The catalog's values for `pairs` (schematic, release), talos-gen at
/// `base_url` their image factory; `from` names where the pairs came from
/// in messages (`--config mirror.yaml`, `the plan`).
pub fn values(base_url: &str, pairs: &[(String, String)], from: &str) -> Result<Node> {
    values_with_storage(base_url, pairs, &[], from)
}

/// [`values`], each entry's `storage` the one at its index in `storage`
/// when given (the raw disk's size plus headroom, [`super::size`]).
pub fn values_with_storage(
    base_url: &str,
    pairs: &[(String, String)],
    storage: &[String],
    from: &str,
) -> Result<Node> {
    let base = crate::registry::names::check_base_url(base_url)
        .map_err(|e| Error::bad_input(format!("--base-url: {e}")))?;
    let base = base.trim_end_matches('/').to_string();
    if pairs.is_empty() {
        return Err(Error::refused(format!(
            "{from}: names no {}-{} disk image of any (schematic, release): the catalog would be empty",
            cozystack::PLATFORM,
            cozystack::ARCH
        )));
    }
    let entries: Vec<Entry> = pairs
        .iter()
        .enumerate()
        .map(|(i, (s, v))| Entry {
            schematic_id: s.clone(),
            version: v.clone(),
            storage: storage.get(i).cloned(),
            ..Default::default()
        })
        .collect();
    let defaults = Defaults {
        image_factory_url: base.clone(),
        ..Default::default()
    };
    cozystack::render(&defaults, &entries, &|i, field| {
        let (s, v) = &pairs[i];
        format!("{from}: images[{i}] (schematic {s}, Talos {v}).{field}")
    })?;
    Ok(cozystack::values_document(&base, &entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

    #[test]
    fn values_of_a_plan_and_refusals() {
        let m = crate::matrix::Matrix::embedded();
        let plan = crate::upgrade::plan(
            m,
            &crate::upgrade::Question {
                from_talos: "v1.11.6",
                from_kubernetes: "1.31.4",
                to_talos: "v1.14.6",
                to_kubernetes: "1.36.3",
                replace: false,
                names: crate::upgrade::FLAGS,
            },
        )
        .unwrap();
        let pairs = pairs_of_plan(&plan, S);
        let versions: Vec<&str> = pairs.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(versions, ["v1.11.6", "v1.12.11", "v1.14.6"]);
        let y = crate::goyaml::to_string(
            &values("http://talos-gen.example:8080/", &pairs, "the plan").unwrap(),
        );
        assert!(
            y.starts_with("imageFactoryURL: http://talos-gen.example:8080\nimages:\n"),
            "{y}"
        );
        assert_eq!(y.matches("schematicID: ").count(), 3);
        // A release the template refuses (an upper-case pre-release).
        let bad = vec![(S.to_string(), "v1.14.0-RC.1".to_string())];
        let e = values("http://x.example", &bad, "--config m.yaml").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().starts_with(&format!(
                "--config m.yaml: images[0] (schematic {S}, Talos v1.14.0-RC.1).version: "
            )),
            "{e}"
        );
        let e = values("ftp://x", &pairs, "the plan").unwrap_err();
        assert!(e.to_string().starts_with("--base-url: "), "{e}");
        assert_eq!(
            values("http://x.example", &[], "the plan")
                .unwrap_err()
                .exit_code(),
            1
        );
    }
}
