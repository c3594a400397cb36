//! Builds the netplugin images (`cni-netplugin`, `lo-netplugin`) as ACI and OCI archives
//! from the two static binaries. Needs no network; the same inputs give the same bytes.
//! `tools/build-netplugin-images` builds the binaries and runs this.
//!
//!     kurma-netplugin-images --cni-plugins target/release/cni-plugins \
//!         --netplugin target/release/kurma-netplugin --plugin-binary target/release/dhcp \
//!         --out OUTDIR
//!
//! Every file's mtime is `SOURCE_DATE_EPOCH` when set, else 0.

use clap::Parser;
use kurma_model::image::build::{write_all, Inputs};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// Builds the netplugin images (cni-netplugin, lo-netplugin) as ACI and OCI archives.
#[derive(Debug, Parser)]
#[command(name = "kurma-netplugin-images", version)]
struct Args {
    /// The cni-plugins multi-call binary the images carry in /opt/cni/bin
    #[arg(long, value_name = "FILE")]
    cni_plugins: PathBuf,
    /// The kurma-netplugin binary, the images' setup/add/del
    #[arg(long, value_name = "FILE")]
    netplugin: PathBuf,
    /// A plugin built as a binary of its own (dhcp, etcd-ipam), carried in cni-netplugin's
    /// /opt/cni/bin under its file name (repeatable)
    #[arg(long = "plugin-binary", value_name = "FILE")]
    plugin_binaries: Vec<PathBuf>,
    /// The directory the archives are written into
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

fn main() -> ExitCode {
    match run(cni_cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kurma-netplugin-images: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let Args { cni_plugins: plugins, netplugin, plugin_binaries, out } = args;
    let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let listed = Command::new(&plugins)
        .arg("--list")
        .output()
        .map_err(|e| format!("{} --list: {e}", plugins.display()))?;
    if !listed.status.success() {
        return Err(format!(
            "{} --list failed: {}",
            plugins.display(),
            String::from_utf8_lossy(&listed.stderr)
        ));
    }
    let names: Vec<String> = String::from_utf8_lossy(&listed.stdout).lines().map(str::to_string).collect();
    let mtime = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v.parse().map_err(|_| format!("SOURCE_DATE_EPOCH={v:?} is not a number of seconds"))?,
        Err(_) => 0,
    };
    let (cni_plugins, netplugin) = (read(&plugins)?, read(&netplugin)?);
    let mut own = Vec::new();
    for path in &plugin_binaries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("{}: no file name", path.display()))?;
        own.push((name.to_string(), read(path)?));
    }
    let own_binaries: Vec<(&str, &[u8])> = own.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    let inputs = Inputs {
        cni_plugins: &cni_plugins,
        netplugin: &netplugin,
        plugin_names: &names,
        own_binaries: &own_binaries,
        version: env!("CARGO_PKG_VERSION"),
        mtime,
        gzip_level: kurma_model::image::oci::GZIP_BEST,
        host_libraries: &[],
    };
    let written = write_all(&inputs, &out).map_err(|e| format!("writing into {}: {e}", out.display()))?;
    for file in written {
        println!("{}  {}", file.sha256, file.path.display());
    }
    Ok(())
}
