//! host-local IPAM (filled in by its issue).
