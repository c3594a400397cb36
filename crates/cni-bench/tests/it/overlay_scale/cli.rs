//! `overlay-scale`'s command line: the shared conventions, and sizes it cannot simulate
//! refused before any namespace or etcd is made.

use std::path::Path;
use std::process::Command;

const OVERLAY_SCALE: &str = env!("CARGO_BIN_EXE_overlay-scale");

#[test]
fn the_command_line_keeps_the_conventions() {
    cni_testkit::cli::assert_conventions(Path::new(OVERLAY_SCALE), &[], "overlay-scale");
}

#[test]
fn sizes_and_ttls_it_cannot_simulate_are_refused_naming_the_flag() {
    for (args, names) in [
        (&["--nodes", "10,1"][..], "--nodes"),
        (&["--nodes", "251"][..], "--nodes"),
        (&["--nodes", "ten"][..], "--nodes"),
        (&["--ttl", "1"][..], "--ttl"),
        (&["--joins=-3"][..], "--joins"),
    ] {
        let output = Command::new(OVERLAY_SCALE).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        assert!(stderr.contains(names), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} started a run: {output:?}");
    }
}
