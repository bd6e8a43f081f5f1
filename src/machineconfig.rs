//! Worker machine configs: typed documents, contract gates, the Cozystack
//! profile, kubelet reservations, patches and secrets. Never touches the
//! network, the store or files: the CLI and HTTP edges read inputs.
