//! Counters and histograms, kept in one place, exported as Prometheus text.
