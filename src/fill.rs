//! One upstream fetch per key, streamed to many readers as bytes arrive,
//! verified and committed to the store only when whole.
