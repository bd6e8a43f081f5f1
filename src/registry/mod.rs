//! What `/v2/` means: repository and reference validation, manifests and
//! blobs by digest, tag revalidation, `?ns=` mirrors.
