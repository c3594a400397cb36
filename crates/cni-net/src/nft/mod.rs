//! nftables over nfnetlink (filled in by its issue).
