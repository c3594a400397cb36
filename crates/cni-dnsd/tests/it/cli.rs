//! cni-dnsd answers --help, --version and --completions as every cni-rs program does.

use std::path::Path;

#[test]
fn cni_dnsd_keeps_the_command_line_conventions() {
    cni_testkit::cli::assert_conventions(Path::new(env!("CARGO_BIN_EXE_cni-dnsd")), &[], "cni-dnsd");
}
