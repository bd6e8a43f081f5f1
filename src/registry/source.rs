//! The Image Factory's source image proxy (Image Factory 1.5): the core
//! Talos images under `siderolabs/` (`/v2/siderolabs/imager/...` with no
//! `?ns=`), so that `talosctl image cache-create` and the imager can run
//! against a factory instead of `ghcr.io`. They come from `ghcr.io` (its
//! `--mirror-upstream` when given, else [`SOURCE_DEFAULT_URL`]) and are
//! kept under its keys, so `mirror sync` (`sourceImages:`) and the
//! pull-through share them. Pure: names in, answers out.

/// The six images the factory proxies, by their name under `siderolabs/`.
pub const SOURCE_IMAGES: &[&str] = &[
    "installer-base",
    "installer",
    "imager",
    "extensions",
    "overlays",
    "talosctl-all",
];

/// The registry they come from (the `ns` their store keys name).
pub const SOURCE_HOST: &str = "ghcr.io";

/// Where [`SOURCE_HOST`] is reached without a `--mirror-upstream` for it.
pub const SOURCE_DEFAULT_URL: &str = "https://ghcr.io";

/// The organisation they live under.
pub const SOURCE_ORG: &str = "siderolabs";

/// Whether `name` (`imager`) is one of [`SOURCE_IMAGES`].
pub fn is_source_image(name: &str) -> bool {
    SOURCE_IMAGES.contains(&name)
}

/// Whether `repo` is `siderolabs/<one of SOURCE_IMAGES>`.
pub fn is_source_repository(repo: &str) -> bool {
    repo.strip_prefix(SOURCE_ORG)
        .and_then(|r| r.strip_prefix('/'))
        .is_some_and(is_source_image)
}

/// `siderolabs/<name>`.
pub fn repository(name: &str) -> String {
    format!("{SOURCE_ORG}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_repositories() {
        for ok in SOURCE_IMAGES {
            assert!(is_source_repository(&repository(ok)), "{ok}");
        }
        for bad in [
            "siderolabs/kubelet",
            "siderolabs/installer/x",
            "siderolabs",
            "siderolabsx/imager",
            "x/siderolabs/imager",
            "imager",
            "siderolabs/Imager",
            "siderolabs/imager-base",
        ] {
            assert!(!is_source_repository(bad), "{bad}");
        }
    }
}
