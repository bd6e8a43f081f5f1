//! The mirror job: sync, verify, export and import.
