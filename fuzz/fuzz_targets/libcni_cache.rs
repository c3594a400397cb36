//! The read path of libcni's result cache (`<cacheDir>/results/<net>-<ctr>-<ifname>`):
//! parsing an entry and converting its result to the list's version, as CHECK and DEL do.
//! The first byte picks the list's version. Never a panic; an entry that reads has the
//! identity fields of the `cniCacheV1` format or is a legacy bare result; a converted
//! result names the list's version.
#![no_main]

use cni_types::Version;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else { return };
    let version = Version::ALL[usize::from(selector) % Version::ALL.len()];
    let Ok((entry, converted)) = libcni::fuzzing::read_cache_entry(bytes, version) else { return };
    if entry.network.is_empty() && entry.container_id.is_empty() {
        assert!(entry.result.is_some(), "a legacy entry is its result");
    }
    if let Some(converted) = converted {
        assert_eq!(converted["cniVersion"], version.as_str());
    }
});
