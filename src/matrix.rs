//! The support matrix: which Kubernetes versions each Talos minor runs.
//! Data lives in `matrix/matrix.yaml`, embedded at build time; `--matrix FILE` replaces it.
