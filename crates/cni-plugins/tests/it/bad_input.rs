//! The bad-input corpus: for every plugin of the multi-call binary, requests a
//! hostile or careless runtime could send — malformed, binary and huge stdin, wrong types,
//! out-of-range values, missing keys, path traversal in `ipam.type` and sysctl keys, a bad
//! environment, unsupported versions, a prevResult of the wrong shape — each of which must
//! be refused with exit status 1, exactly one valid CNI error JSON on stdout with the
//! expected code (and a message naming the field where the case is about one), and no
//! change at all: the links, addresses, routes of every table, rules, neighbours, qdiscs and
//! nftables ruleset of the throwaway "host" and "container" namespaces, and the plugin's
//! data directory, are snapshotted before and after each case.
//!
//! The cases are tables in `tests/bad_input/`: `common.json` applies to every plugin,
//! `<plugin>.json` holds the plugin's valid base configuration and its own cases, each a
//! change of the base (set or remove keys by JSON pointer, environment, raw stdin). A
//! table marked `"control": true` ends with its base configuration's ADD, which must
//! succeed and change something — proof that each case was refused for its one change.
//!
//! With `BI_COMPARE_GO=1` and Debian's Go reference plugin installed (`/usr/lib/cni`), the
//! same cases also run against it in namespaces of its own and the outcomes are printed side
//! by side (`--nocapture`); only our plugin's behaviour is asserted.

use crate::common;

use cni_net::netlink::{AddressFlags, LinkSpec, VethSpec};
use cni_testkit::json_pointer;
use cni_testkit::ns::TestNetns;
use cni_testkit::runner::{PluginCall, PluginOutput};
use cni_testkit::snapshot::Scope;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const PREFIX: &str = "bi";
const GO_PLUGINS: &str = "/usr/lib/cni";
/// The size of the "huge stdin" cases: far more than any real configuration.
const HUGE: usize = 64 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    base: Value,
    /// Environment every case of the table starts from (e.g. a CNI_IFNAME that does not
    /// exist yet, so that only the case's own change can be why it is refused).
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Shared tables whose cases apply to this plugin too (`ipam.json`, `prevresult.json`).
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    control: bool,
    cases: Vec<Case>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default = "add")]
    verb: String,
    /// JSON pointer → value to set in the base configuration (parents are made).
    #[serde(default)]
    set: BTreeMap<String, Value>,
    /// JSON pointers to remove from the base configuration.
    #[serde(default)]
    remove: Vec<String>,
    /// Environment variables to set ("" sets an empty value).
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Environment variables to remove.
    #[serde(default)]
    unset: Vec<String>,
    /// Raw stdin instead of the configuration.
    #[serde(default)]
    stdin: Option<String>,
    /// Generated stdin: "binary", "huge-garbage", "huge-name", "deep-nesting".
    #[serde(default)]
    generate: Option<String>,
    /// Expected error code.
    code: u32,
    /// Substrings the message (or its details) must contain, e.g. the field's name.
    #[serde(default)]
    msg: Vec<String>,
    /// Plugins a shared case (`common.json`, an include) does not apply to.
    #[serde(default)]
    except: Vec<String>,
}

fn add() -> String {
    "ADD".into()
}

fn load_table(file: &str) -> Table {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_input").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The namespaces and directory one plugin's cases run in. The host has `bih0`, a veth
/// whose peer is the container's addressed `eth0` (what prevResults describe), and two
/// spare veth pairs: `bim0`/`bim1` (a master for macvlan, ipvlan and vlan) and
/// `bid0`/`bid1` (a device for host-device).
struct Fixture {
    host: TestNetns,
    ctr: TestNetns,
    data: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let host = TestNetns::with_prefix(PREFIX).unwrap();
        let ctr = TestNetns::with_prefix(PREFIX).unwrap();
        // No duplicate address detection: the link-local addresses of the links made below
        // are final at once, instead of turning from tentative during the first cases.
        for ns in [&host, &ctr] {
            let out = ns
                .command("sysctl")
                .args(["-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"])
                .output()
                .unwrap();
            assert!(out.status.success(), "sysctl: {}", String::from_utf8_lossy(&out.stderr));
        }
        let mut nl = host.netlink().unwrap();
        nl.add_veth(&VethSpec {
            link: LinkSpec::new("bih0"),
            peer: LinkSpec::new("eth0").netns(ctr.netns()),
        })
        .unwrap();
        for (a, b) in [("bim0", "bim1"), ("bid0", "bid1")] {
            nl.add_veth(&VethSpec { link: LinkSpec::new(a), peer: LinkSpec::new(b) }).unwrap();
        }
        for name in ["bih0", "bim0", "bim1", "bid0", "bid1"] {
            let link = nl.require_link(name).unwrap();
            nl.set_link_up(link.index).unwrap();
        }
        let bih0 = nl.require_link("bih0").unwrap();
        nl.add_address(bih0.index, "10.89.0.1/24".parse().unwrap(), AddressFlags::empty()).unwrap();
        let mut cnl = ctr.netlink().unwrap();
        let eth0 = cnl.require_link("eth0").unwrap();
        cnl.add_address(eth0.index, "10.89.0.2/24".parse().unwrap(), AddressFlags::empty()).unwrap();
        cnl.set_link_up(eth0.index).unwrap();
        let data = tempfile::Builder::new().prefix("bi-data").tempdir().unwrap();
        let fixture = Fixture { host, ctr, data };
        fixture.settle();
        fixture
    }

    /// Waits until the links just made reached their final state (carrier up, link-local
    /// addresses and their routes in place) and two snapshots in a row agree, so that the
    /// first cases' "before" is not still moving.
    fn settle(&self) {
        let scope = self.scope();
        let mut last = scope.take();
        for _ in 0..200 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let now = scope.take();
            let links_final = ["host", "ctr"].iter().all(|ns| {
                let links = now.section(&format!("{ns}/links")).unwrap_or_default();
                let routes = now.section(&format!("{ns}/routes6")).unwrap_or_default();
                !links.contains("NO-CARRIER")
                    && routes.matches("fe80::/64").count() == links.matches("veth").count()
            });
            if links_final && now == last {
                return;
            }
            last = now;
        }
        panic!("the fixture's namespaces never settled");
    }

    /// The text of `value` with the fixture's paths put in for the placeholders.
    fn fill(&self, value: &Value) -> Value {
        let text = value
            .to_string()
            .replace("@DATA@", &self.data.path().display().to_string())
            .replace("@CTR@", &self.ctr.path().display().to_string());
        serde_json::from_str(&text).unwrap()
    }

    fn scope(&self) -> Scope<'_> {
        Scope::new().netns("host", &self.host).netns("ctr", &self.ctr).dir("data", self.data.path())
    }
}

/// The stdin of a case.
fn stdin_of(case: &Case, conf: &Value) -> Vec<u8> {
    if let Some(raw) = &case.stdin {
        return raw.as_bytes().to_vec();
    }
    match case.generate.as_deref() {
        None => serde_json::to_vec(conf).unwrap(),
        Some("binary") => (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect(),
        Some("huge-garbage") => [0x00, 0xff, b'{', b'"'].repeat(HUGE / 4),
        Some("huge-name") => {
            // Valid JSON and a valid character set: only its size is wrong. Spliced in as
            // bytes: serialising 64 MiB through serde in a debug build takes seconds.
            let mut conf = conf.clone();
            conf["name"] = Value::String("@NAME@".into());
            let text = serde_json::to_vec(&conf).unwrap();
            let at = text.windows(6).position(|w| w == b"@NAME@").unwrap();
            [&text[..at], &vec![b'n'; HUGE][..], &text[at + 6..]].concat()
        }
        Some("deep-nesting") => {
            let mut text = b"{\"cniVersion\":\"1.1.0\",\"name\":\"bi\",\"type\":\"x\",\"k\":".to_vec();
            text.extend(std::iter::repeat_n(b'[', 1 << 20));
            text
        }
        Some(other) => panic!("unknown generator {other}"),
    }
}

fn call_of(
    binary: &Path,
    fx: &Fixture,
    base_env: &BTreeMap<String, String>,
    case: &Case,
    conf: &Value,
) -> PluginCall {
    let mut call = PluginCall::new(binary, &case.verb)
        .in_namespace(fx.host.path())
        .cni_path(&binary.parent().unwrap().display().to_string())
        .netns(fx.ctr.path())
        .container_id("bi-ctr")
        .stdin(stdin_of(case, conf));
    for (k, v) in base_env.iter().chain(&case.env) {
        call = call.env(k, v.clone());
    }
    for k in &case.unset {
        call = call.unset(k);
    }
    call
}

/// What is wrong with `out` for `case`, if anything (not counting state changes).
fn judge(case: &Case, out: &PluginOutput) -> Option<String> {
    if out.status != 1 {
        return Some(format!("exit status {} (stdout {:?})", out.status, clip(&out.stdout)));
    }
    if out.stderr.contains("panicked") {
        return Some(format!("panicked: {}", clip(&out.stderr)));
    }
    // Exactly one JSON value: from_str refuses trailing content.
    let error: Value = match serde_json::from_str(&out.stdout) {
        Ok(v) => v,
        Err(e) => return Some(format!("stdout is not one JSON value ({e}): {:?}", clip(&out.stdout))),
    };
    let code = error["code"].as_u64();
    let msg = error["msg"].as_str().unwrap_or_default();
    let text = format!("{msg} {}", error["details"].as_str().unwrap_or_default());
    if code != Some(case.code.into()) || msg.is_empty() {
        return Some(format!("expected code {}, got {}", case.code, clip(&error.to_string())));
    }
    let text = text.to_lowercase();
    let missing: Vec<&String> = case.msg.iter().filter(|m| !text.contains(&m.to_lowercase())).collect();
    if !missing.is_empty() {
        return Some(format!("message does not name {missing:?}: {}", clip(&text)));
    }
    None
}

fn clip(s: &str) -> String {
    clip_to(s, 300)
}

fn clip_to(s: &str, limit: usize) -> String {
    if s.len() <= limit {
        return s.to_string();
    }
    let end = (0..=limit).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
    format!("{}... ({} bytes)", &s[..end], s.len())
}

/// One line of what the Go plugin did with a case, for the printed comparison.
fn go_outcome(
    binary: &Path,
    fx: &Fixture,
    env: &BTreeMap<String, String>,
    case: &Case,
    conf: &Value,
) -> String {
    let before = fx.scope().take();
    let out = call_of(binary, fx, env, case, conf).run();
    let changed: Vec<String> = before
        .diff(&fx.scope().take())
        .iter()
        .map(|d| d.split(' ').next().unwrap_or_default().to_string())
        .collect();
    let code = serde_json::from_str::<Value>(&out.stdout).ok().and_then(|v| v["code"].as_u64());
    format!(
        "exit {} code {} {}",
        out.status,
        code.map_or("-".into(), |c| c.to_string()),
        if changed.is_empty() { "no change".to_string() } else { format!("CHANGED {}", changed.join(",")) }
    )
}

/// The case's configuration: the base with the case's keys set and removed.
fn conf_of(fx: &Fixture, base: &Value, case: &Case) -> Value {
    let mut conf = base.clone();
    for (pointer, value) in &case.set {
        json_pointer::set(&mut conf, pointer, fx.fill(value));
    }
    for pointer in &case.remove {
        json_pointer::remove(&mut conf, pointer);
    }
    conf
}

/// The Go plugin's fixture, when asked for (`BI_COMPARE_GO=1`) and installed.
fn go_fixture(plugin: &str) -> Option<(PathBuf, Fixture)> {
    let binary = PathBuf::from(GO_PLUGINS).join(plugin);
    (std::env::var_os("BI_COMPARE_GO").is_some() && binary.exists()).then(|| (binary, Fixture::new()))
}

/// Runs `plugin`'s table, its includes and the common cases; panics listing every case
/// that failed. Returns the number of cases run.
fn run_corpus(plugin: &str) -> usize {
    let own = load_table(&format!("{plugin}.json"));
    let cases: Vec<Case> = load_table("common.json")
        .cases
        .into_iter()
        .chain(own.include.iter().flat_map(|file| load_table(file).cases))
        .filter(|c| !c.except.iter().any(|e| e == plugin))
        .chain(own.cases.iter().cloned())
        .collect();
    let binary = common::plugin(plugin);
    let go = go_fixture(plugin);
    let fx = Fixture::new();
    let base = fx.fill(&own.base);
    let scope = fx.scope();
    let mut failures = Vec::new();
    // Each case's "after" is the next case's "before": one snapshot per case.
    let mut before = scope.take();
    for case in &cases {
        let conf = conf_of(&fx, &base, case);
        let out = call_of(&binary, &fx, &own.env, case, &conf).run();
        let after = scope.take();
        let mut problems: Vec<String> = judge(case, &out).into_iter().collect();
        problems.extend(before.diff(&after).into_iter().map(|d| clip_to(&d, 3000)));
        before = after;
        let go_line = go.as_ref().map(|(go_binary, gfx)| {
            let go_conf = conf_of(gfx, &gfx.fill(&own.base), case);
            format!(" | go: {}", go_outcome(go_binary, gfx, &own.env, case, &go_conf))
        });
        let code = serde_json::from_str::<Value>(&out.stdout).ok().and_then(|v| v["code"].as_u64());
        println!(
            "{plugin:12} {:4} {:50} ours: exit {} code {}{}",
            if problems.is_empty() { "ok" } else { "FAIL" },
            case.name,
            out.status,
            code.map_or("-".into(), |c| c.to_string()),
            go_line.unwrap_or_default()
        );
        if !problems.is_empty() {
            failures.push(format!("{} ({} {plugin}): {}", case.name, case.verb, problems.join("; ")));
        }
    }
    println!("{plugin}: {} cases, {} passed", cases.len(), cases.len() - failures.len());
    assert!(
        failures.is_empty(),
        "{plugin}: {} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    if own.control {
        control(plugin, &binary, &fx, &own.env, &base);
    }
    cases.len()
}

/// The base configuration's ADD succeeds and changes something, and its DEL restores the
/// state from before: each case was refused for its own change, not for a broken base.
fn control(plugin: &str, binary: &Path, fx: &Fixture, env: &BTreeMap<String, String>, base: &Value) {
    let scope = fx.scope();
    let before = scope.take();
    let add = Case {
        name: "control".into(),
        verb: "ADD".into(),
        set: BTreeMap::new(),
        remove: Vec::new(),
        env: BTreeMap::new(),
        unset: Vec::new(),
        stdin: None,
        generate: None,
        code: 0,
        msg: Vec::new(),
        except: Vec::new(),
    };
    common::ok(call_of(binary, fx, env, &add, base).run());
    assert!(!before.diff(&scope.take()).is_empty(), "{plugin}: the base configuration's ADD changed nothing");
    let del = Case { verb: "DEL".into(), ..add };
    common::ok(call_of(binary, fx, env, &del, base).run());
}

macro_rules! corpus {
    ($($test:ident => $plugin:literal),* $(,)?) => {
        $(#[test] fn $test() { assert!(run_corpus($plugin) > 0); })*
    };
}

corpus! {
    bridge => "bridge",
    ptp => "ptp",
    macvlan => "macvlan",
    ipvlan => "ipvlan",
    vlan => "vlan",
    host_device => "host-device",
    tap => "tap",
    dummy => "dummy",
    loopback => "loopback",
    host_local => "host-local",
    static_ipam => "static",
    dhcp => "dhcp",
    portmap => "portmap",
    firewall => "firewall",
    tuning => "tuning",
    bandwidth => "bandwidth",
    sbr => "sbr",
    dnsname => "dnsname",
}
