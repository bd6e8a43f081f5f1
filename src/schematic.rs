//! Schematics: strict parsing, the canonical encoding (via `goyaml`) and the
//! sha256 ID, identical to the Image Factory's.
