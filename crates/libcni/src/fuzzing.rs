//! Entry point for the fuzz targets in `fuzz/` (not an API: hidden from the docs and free
//! to change): the read path of a result cache entry without the file around it.

use crate::cache::{self, NetworkAttachment};
use crate::error::Result;
use cni_types::Version;
use serde_json::Value;
use std::path::Path;

/// Parses the bytes of a cache file as [`crate::CniConfig::cached_result`] reads one, and
/// converts its result to `version` as CHECK and DEL then do.
pub fn read_cache_entry(bytes: &[u8], version: Version) -> Result<(NetworkAttachment, Option<Value>)> {
    let path = Path::new("/fuzz/results/net-ctr-eth0");
    let entry = cache::parse(bytes, path)?;
    let converted = match &entry.result {
        Some(result) => {
            Some(crate::runtime::convert_result("the fuzzed cache entry", result.clone(), version)?)
        }
        None => None,
    };
    Ok((entry, converted))
}
