//! `cni-bench`'s command line keeps the shared conventions.
#[test]
fn the_command_line_keeps_the_conventions() {
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_cni-bench"));
    cni_testkit::cli::assert_conventions(binary, &[], "cni-bench");
}

#[test]
fn a_bad_option_is_refused_naming_it_before_anything_runs() {
    for (args, names) in [
        (&["-n", "0"][..], "-n"),
        (&["--workloads", "W9"][..], "W9"),
        (&["--only-a", "--b", "/nonexistent"][..], "--only-a"),
        (&["--a", "/nonexistent", "--plugins-bin", "/nonexistent"][..], "--plugins-bin"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_cni-bench")).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        assert!(stderr.contains(names), "{args:?}: {stderr}");
        assert!(!stderr.contains("creating"), "{args:?} started a run: {stderr}");
    }
}
