//! The query of every `/api/v1/` route, read one way: each parameter known
//! to the route (an unknown one is 400 with the nearest known name), given
//! once unless the route lists it as repeatable (a repeated one is 400
//! naming it: the last one never silently wins), and every boolean in the
//! one grammar the CLI's flags take ([`crate::text::parse_bool`]: `true`/
//! `false`, `1`/`0`, any case).

use crate::error::Error;

/// A route's query, checked against the names it knows.
#[derive(Debug, Clone)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// Check `pairs` against `known`; names in `repeatable` may come more
    /// than once (the flags that repeat), every other one at most once.
    pub fn new(
        pairs: Vec<(String, String)>,
        known: &[&str],
        repeatable: &[&str],
    ) -> Result<Params, Error> {
        for (i, (k, _)) in pairs.iter().enumerate() {
            if !known.contains(&k.as_str()) {
                return Err(Error::bad_input(crate::text::unknown_word(
                    "query parameter",
                    k,
                    known,
                )));
            }
            if !repeatable.contains(&k.as_str()) && pairs[..i].iter().any(|(o, _)| o == k) {
                let times = pairs.iter().filter(|(o, _)| o == k).count();
                return Err(Error::bad_input(format!(
                    "{k}: given {times} times; give it once (which one was meant cannot be guessed)"
                )));
            }
        }
        Ok(Params { pairs })
    }

    /// The value of `k`, if given.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(o, _)| o == k)
            .map(|(_, v)| v.as_str())
    }

    /// Was `k` given?
    pub fn has(&self, k: &str) -> bool {
        self.get(k).is_some()
    }

    /// Every value of `k`, in order.
    pub fn all<'a>(&'a self, k: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(o, _)| o == k)
            .map(|(_, v)| v.as_str())
    }

    /// The pairs in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// `k` as a boolean (absent: false), in the one grammar.
    pub fn flag(&self, k: &str) -> Result<bool, Error> {
        match self.get(k) {
            None => Ok(false),
            Some(v) => flag(k, v),
        }
    }
}

/// `v` as the boolean `k`: `true`/`false`, `1`/`0`, any case, as every
/// boolean flag of the CLI; anything else is bad input naming both.
pub fn flag(k: &str, v: &str) -> Result<bool, Error> {
    crate::text::parse_bool(v).ok_or_else(|| {
        Error::bad_input(format!(
            "{k}: {} is not a boolean; give true or false, 1 or 0",
            crate::text::clip_quoted(&format!("{v:?}"))
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn unknown_repeated_and_booleans() {
        let known = ["fromTalos", "replace", "nameserver"];
        let e = Params::new(q(&[("fromTalso", "v1")]), &known, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown query parameter \"fromTalso\" (nearest known: \"fromTalos\")"
        );
        let e = Params::new(
            q(&[
                ("replace", "true"),
                ("fromTalos", "a"),
                ("replace", "false"),
            ]),
            &known,
            &[],
        )
        .unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().starts_with("replace: given 2 times"), "{e}");
        let p = Params::new(
            q(&[("nameserver", "a"), ("nameserver", "b")]),
            &known,
            &["nameserver"],
        )
        .unwrap();
        assert_eq!(p.all("nameserver").collect::<Vec<_>>(), ["a", "b"]);
        for (v, want) in [("1", true), ("TRUE", true), ("False", false), ("0", false)] {
            let p = Params::new(q(&[("replace", v)]), &known, &[]).unwrap();
            assert_eq!(p.flag("replace").unwrap(), want, "{v}");
        }
        let p = Params::new(q(&[("replace", "yes")]), &known, &[]).unwrap();
        assert!(
            p.flag("replace")
                .unwrap_err()
                .to_string()
                .starts_with("replace: \"yes\"")
        );
        assert!(
            !Params::new(q(&[]), &known, &[])
                .unwrap()
                .flag("replace")
                .unwrap()
        );
    }
}
