//! host-local's on-disk state as a test oracle: which addresses a network holds.

use std::path::Path;

/// The addresses host-local holds for `network` under `data_dir`: the regular files of the
/// network's directory named like an address, sorted. A missing directory holds none.
pub fn reservations(data_dir: &Path, network: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(data_dir.join(network)) else { return Vec::new() };
    let mut names: Vec<String> = dir
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect();
    names.sort();
    names
}
