//! The content-addressed store: objects by sha256 under the cache dir, an
//! index from keys to objects. Knows nothing of HTTP, Talos or OCI.
