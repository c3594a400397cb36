//! Builds the netplugin images (`cni-netplugin`, `lo-netplugin`) as ACI and OCI archives
//! from the two static binaries. Needs no network; the same inputs give the same bytes.
//! `tools/build-netplugin-images` builds the binaries and runs this.
//!
//!     kurma-netplugin-images --cni-plugins target/release/cni-plugins \
//!         --netplugin target/release/kurma-netplugin --out OUTDIR
//!
//! Every file's mtime is `SOURCE_DATE_EPOCH` when set, else 0.

use kurma_netplugin::image::build::{write_all, Inputs};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

const USAGE: &str = "usage: kurma-netplugin-images --cni-plugins FILE --netplugin FILE --out DIR";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kurma-netplugin-images: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (mut plugins, mut netplugin, mut out) = (None, None, None);
    while let Some(flag) = args.next() {
        let slot = match flag.as_str() {
            "--cni-plugins" => &mut plugins,
            "--netplugin" => &mut netplugin,
            "--out" => &mut out,
            _ => return Err(format!("unknown argument {flag:?}\n{USAGE}")),
        };
        *slot = Some(PathBuf::from(args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?));
    }
    let (Some(plugins), Some(netplugin), Some(out)) = (plugins, netplugin, out) else {
        return Err(USAGE.to_string());
    };
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
    let inputs = Inputs {
        cni_plugins: &cni_plugins,
        netplugin: &netplugin,
        plugin_names: &names,
        version: env!("CARGO_PKG_VERSION"),
        mtime,
        gzip_level: kurma_netplugin::image::oci::GZIP_BEST,
        host_libraries: &[],
    };
    let written = write_all(&inputs, &out).map_err(|e| format!("writing into {}: {e}", out.display()))?;
    for file in written {
        println!("{}  {}", file.sha256, file.path.display());
    }
    Ok(())
}
