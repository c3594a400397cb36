//! cnitool as a daily tool: `list` with addresses, `inspect`, and the completion scripts
//! loaded by the shells they are for and asked what they complete. Unprivileged: the test
//! plugin does no networking. bash, zsh and fish come from tools/test's package list.

use crate::support::ok;
use cni_testkit::binaries::test_plugin;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};

const CNITOOL: &str = env!("CARGO_BIN_EXE_cnitool");

/// cnitool with a conflist per network in `dir/net.d` and the cache in `dir/cache`.
fn cnitool(dir: &Path, args: &[&str]) -> Output {
    Command::new(CNITOOL)
        .args(args)
        .env_remove("CNI_ARGS")
        .env_remove("CAP_ARGS")
        .env_remove("CNI_IFNAME")
        .env("NETCONFPATH", dir.join("net.d"))
        .env("CNI_PATH", test_plugin().parent().unwrap())
        .env("CNI_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap()
}

fn network(dir: &Path, name: &str, version: &str, result: Value) {
    let list = json!({"cniVersion": version, "name": name, "plugins": [
        {"type": "cni-test-plugin", "testBehaviour": {"result": result}}]});
    std::fs::create_dir_all(dir.join("net.d")).unwrap();
    std::fs::write(dir.join(format!("net.d/{name}.conflist")), list.to_string()).unwrap();
}

#[test]
fn list_shows_each_attachments_addresses_and_inspect_finds_one_container() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    network(
        dir,
        "op-new",
        "1.1.0",
        json!({"ips": [{"address": "10.77.0.5/24", "gateway": "10.77.0.1"}, {"address": "fd77::5/64"}]}),
    );
    // An old-version network: its result is cached in the 0.2.0 shape.
    network(dir, "op-old", "0.2.0", json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.78.0.9/24"}}));
    ok(cnitool(dir, &["add", "op-new", "/run/netns/op-a"]));
    ok(cnitool(dir, &["add", "op-new", "/run/netns/op-b", "-i", "net1"]));
    ok(cnitool(dir, &["add", "op-old", "/run/netns/op-a", "-i", "net2"]));

    let listed: Value = serde_json::from_str(&ok(cnitool(dir, &["list"]))).unwrap();
    let mut rows: Vec<(String, String, Value)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (a["network"].as_str().unwrap().into(), a["ifName"].as_str().unwrap().into(), a["ips"].clone())
        })
        .collect();
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    assert_eq!(
        rows,
        [
            ("op-new".into(), "eth0".into(), json!(["10.77.0.5/24", "fd77::5/64"])),
            ("op-new".into(), "net1".into(), json!(["10.77.0.5/24", "fd77::5/64"])),
            ("op-old".into(), "net2".into(), json!(["10.78.0.9/24"])),
        ]
    );

    // By namespace path: both networks of container A, with the configuration they used.
    let by_netns: Value = serde_json::from_str(&ok(cnitool(dir, &["inspect", "/run/netns/op-a"]))).unwrap();
    let by_netns = by_netns.as_array().unwrap();
    assert_eq!(by_netns.len(), 2, "{by_netns:?}");
    let id = by_netns[0]["containerId"].as_str().unwrap().to_string();
    assert!(by_netns.iter().all(|a| a["containerId"] == id.as_str() && a["netns"] == "/run/netns/op-a"));
    let old = by_netns.iter().find(|a| a["network"] == "op-old").unwrap();
    assert_eq!(old["config"]["cniVersion"], "0.2.0");
    assert_eq!(old["ips"], json!(["10.78.0.9/24"]));
    assert!(Path::new(old["cacheFile"].as_str().unwrap()).starts_with(dir.join("cache")));

    // By full ID and by a prefix of it: the same answer.
    let by_id = ok(cnitool(dir, &["inspect", &id]));
    assert_eq!(serde_json::from_str::<Value>(&by_id).unwrap(), Value::Array(by_netns.clone()));
    assert_eq!(ok(cnitool(dir, &["inspect", &id[..14]])), by_id);

    // Not found and ambiguous are errors that say so, exit status 1.
    let out = cnitool(dir, &["inspect", "op-nobody"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no cached attachment"), "{out:?}");
    let out = cnitool(dir, &["inspect", "cnitool-"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("several container IDs"), "{out:?}");
}

/// The shells `completions` and `--completions` take (clap_complete's), as each shell offers
/// them.
const SHELLS: [&str; 5] = ["bash", "elvish", "fish", "powershell", "zsh"];

/// `cnitool completions SHELL` and `cnitool --completions SHELL` (every cni-rs program's
/// spelling) print the same script.
#[test]
fn both_spellings_print_the_same_script() {
    for shell in SHELLS {
        let verb = ok(Command::new(CNITOOL).args(["completions", shell]).output().unwrap());
        let flag = ok(Command::new(CNITOOL).args(["--completions", shell]).output().unwrap());
        assert_eq!(verb, flag, "{shell}");
        assert!(verb.contains("validate"), "{shell}: {verb}");
    }
}

/// The script for `shell`, written to a file in `dir`.
fn script_file(dir: &Path, shell: &str) -> std::path::PathBuf {
    let script = ok(Command::new(CNITOOL).args(["completions", shell]).output().unwrap());
    let file = dir.join(format!("cnitool.{shell}"));
    std::fs::write(&file, script).unwrap();
    file
}

/// Sources the generated bash script and asks its function what it completes `line` to
/// (the cursor at its end).
fn bash_complete(line: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = script_file(dir.path(), "bash");
    let program = r#"source "$1"; read -ra COMP_WORDS <<< "$2"; [[ "$2" == *" " ]] && COMP_WORDS+=("");
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _cnitool; printf '%s\n' "${COMPREPLY[@]}""#;
    let out = Command::new("bash").args(["-c", program, "bash"]).arg(&file).arg(line).output().unwrap();
    let text = ok(out);
    text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}

#[test]
fn the_bash_completion_offers_what_the_parser_accepts() {
    assert_eq!(bash_complete("cnitool in"), ["inspect"]);
    assert_eq!(bash_complete("cnitool c"), ["check", "completions"]);
    assert_eq!(bash_complete("cnitool completions "), SHELLS);
    assert_eq!(bash_complete("cnitool --completions "), SHELLS);
    assert_eq!(bash_complete("cnitool help li"), ["list"]);
    assert_eq!(bash_complete("cnitool add net --ca"), ["--cache-dir"]);
    assert_eq!(bash_complete("cnitool -i eth1 st"), ["status"]);
    // After an option that takes a value, nothing is offered but directories for --cache-dir.
    assert!(bash_complete("cnitool list --timeout ").is_empty());
    // The namespace path of add: files.
    let netns = bash_complete("cnitool add net /proc/self/ns/ne");
    assert_eq!(netns, ["/proc/self/ns/net"]);
    // The configuration of validate: files, and its --json option.
    assert_eq!(bash_complete("cnitool validate /proc/self/ns/ne"), ["/proc/self/ns/net"]);
    assert_eq!(bash_complete("cnitool validate --js"), ["--json"]);
    // A finished command line gets nothing more.
    assert!(bash_complete("cnitool completions bash ").is_empty());
    // Options only cnitool itself takes are offered before the verb, not after it.
    assert_eq!(bash_complete("cnitool --vers"), ["--version"]);
    assert!(bash_complete("cnitool list --vers").is_empty());
    // --cache-dir: directories only (/proc/self/environ is a file).
    let mut dirs = bash_complete("cnitool --cache-dir /proc/self/n");
    dirs.sort();
    assert_eq!(dirs, ["/proc/self/net", "/proc/self/ns"]);
    assert!(bash_complete("cnitool --cache-dir /proc/self/enviro").is_empty());
}

/// What fish completes `line` to with the generated script loaded (candidates only).
fn fish_complete(line: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = script_file(dir.path(), "fish");
    let out = Command::new("fish")
        .args(["--no-config", "-c", "source $argv[1]; complete -C $argv[2]"])
        .arg(&file)
        .arg(line)
        .output()
        .expect("fish (tools/test installs it)");
    ok(out).lines().map(|l| l.split('\t').next().unwrap().to_string()).collect()
}

#[test]
fn the_fish_completion_offers_what_the_parser_accepts() {
    assert_eq!(fish_complete("cnitool in"), ["inspect"]);
    assert_eq!(fish_complete("cnitool completions "), SHELLS);
    assert_eq!(fish_complete("cnitool help li"), ["list"]);
    assert_eq!(fish_complete("cnitool --ca"), ["--cache-dir"]);
    assert_eq!(fish_complete("cnitool --completions "), SHELLS);
    assert!(fish_complete("cnitool --timeout ").is_empty());
    assert_eq!(fish_complete("cnitool add net /proc/self/ns/ne"), ["/proc/self/ns/net"]);
}

/// Drives an interactive zsh on a pseudo-terminal (zsh's own zpty module): loads the
/// generated script through compinit, types `line` and a tab, and prints what the
/// completion offered (a `compadd` wrapper records the candidates). Each step waits for the
/// shell's own output, never for time; `timeout` bounds a hung shell. The keys are typed
/// once the line editor reads (its `zle-line-init` says so): typed while the terminal is
/// still in cooked mode, `^D` was taken as end-of-file and the probe hung now and then.
const ZSH_PROBE: &str = r#"
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z 'compadd () { local -a hits; builtin compadd -O hits "$@"; (( $#hits )) && print -l -- "<m>"${^hits} >&2; builtin compadd "$@" }'
zpty -w z 'finish () { print -u2 "<done>"; zle kill-whole-line }; zle -N finish; bindkey "^X^D" finish'
zpty -w z "exec 2>$1/offered"
zpty -w z 'zle-line-init () { [[ -n $armed ]] && { unset armed; print -nr -- ${(L):-ZLE-READY} } }; zle -N zle-line-init'
zpty -w z 'armed=1'
zpty -r z line '*zle-ready*'
zpty -w -n z "$2"$'\t'
zpty -w -n z $'\C-x\C-d'
zpty -w z 'print ${(L):-COMPLETION-DONE}'
zpty -r z line '*completion-done*'
zpty -d z
grep -q '^<done>$' $1/offered || exit 3
grep '^<m>' $1/offered | sed 's/^<m>//' | awk '!seen[$0]++'
"#;

fn zsh_complete(line: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let script = ok(Command::new(CNITOOL).args(["completions", "zsh"]).output().unwrap());
    // compinit finds a completion function by its file name in $fpath.
    std::fs::write(dir.path().join("_cnitool"), script).unwrap();
    std::fs::write(dir.path().join("probe.zsh"), ZSH_PROBE).unwrap();
    let out = Command::new("timeout")
        .args(["60", "zsh", "-f"])
        .arg(dir.path().join("probe.zsh"))
        .arg(dir.path())
        .arg(line)
        .output()
        .expect("zsh (tools/test installs it)");
    ok(out).lines().map(str::to_string).collect()
}

#[test]
fn the_zsh_completion_offers_what_the_parser_accepts() {
    assert_eq!(zsh_complete("cnitool in"), ["inspect"]);
    assert_eq!(zsh_complete("cnitool c"), ["check", "completions"]);
    assert_eq!(zsh_complete("cnitool completions "), SHELLS);
    assert_eq!(zsh_complete("cnitool help li"), ["list"]);
    assert_eq!(zsh_complete("cnitool --ca"), ["--cache-dir"]);
    assert!(zsh_complete("cnitool list --timeout ").is_empty());
    // zsh completes a path component by component; the last one offered is the file.
    assert_eq!(zsh_complete("cnitool add net /proc/self/ns/ne").last().map(String::as_str), Some("net"));
}
