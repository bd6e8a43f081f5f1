//! HTTP client rules for upstreams: redirects (no credentials to other
//! hosts), timeouts, bearer-token challenges.
