//! The multi-call binary: `bridge`, `host-local`, ... are links to it; it runs the plugin
//! its name says. `cni-plugins <name>` does the same; `cni-plugins install <dir>` makes
//! the links; `cni-plugins --list` prints the plugin names.

use cni_plugins::registry;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "usage: cni-plugins <plugin> | install <dir> | --list | --help
  <plugin>        run that plugin (as a runtime would run the link of that name)
  install <dir>   put every plugin name into a CNI bin directory (hard links, else copies)
  --list          print the plugin names";

fn main() -> ExitCode {
    // A plugin's caller waits for it to exit: the kernel's slow clean-up after a DEL goes
    // to helper processes (unless CNI_RS_NO_HELPER_PROCESSES is set; see cni_os::detach).
    cni_os::detach::enable_helper_processes();
    let args: Vec<String> = std::env::args().collect();
    let invoked_as = args.first().map(|a| basename(a)).unwrap_or_default();
    // bridge delegating to host-local (a link to this binary) then runs it in process.
    cni_sdk::delegate::run_own_plugins_in_process(|name| registry::find(name).map(|e| (e.make)()));
    if let Some(entry) = registry::find(&invoked_as) {
        cni_sdk::run(&*(entry.make)());
    }
    match args.get(1).map(String::as_str) {
        Some("--list") => {
            for entry in registry::plugins() {
                println!("{}", entry.name);
            }
            ExitCode::SUCCESS
        }
        Some("install") => match args.get(2) {
            Some(dir) => match install(Path::new(dir)) {
                Ok(n) => {
                    println!("installed {n} plugins into {dir}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("cni-plugins install: {e}");
                    ExitCode::FAILURE
                }
            },
            None => usage_error(),
        },
        Some("--help" | "-h") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(name) => match registry::find(name) {
            Some(entry) => cni_sdk::run(&*(entry.make)()),
            None => {
                eprintln!("cni-plugins: unknown plugin {name:?} (see --list)");
                ExitCode::FAILURE
            }
        },
        None => usage_error(),
    }
}

fn usage_error() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

fn basename(path: &str) -> String {
    Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Links every plugin name in `dir` to this binary. An existing file of that name is
/// replaced atomically (link to a temp name, then rename), so a runtime never sees a
/// missing plugin mid-upgrade.
fn install(dir: &Path) -> std::io::Result<usize> {
    let me = std::env::current_exe()?;
    std::fs::create_dir_all(dir)?;
    for entry in registry::plugins() {
        let target = dir.join(entry.name);
        let temp: PathBuf = dir.join(format!(".{}.cni-plugins-new", entry.name));
        let _ = std::fs::remove_file(&temp);
        if std::fs::hard_link(&me, &temp).is_err() {
            std::fs::copy(&me, &temp)?;
        }
        std::fs::rename(&temp, &target)?;
    }
    Ok(registry::plugins().len())
}
