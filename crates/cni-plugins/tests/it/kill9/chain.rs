//! `kill -9` of a runtime in the middle of a chain: cnitool (libcni) runs bridge +
//! host-local, portmap, firewall, tuning and bandwidth for one container, and the whole
//! process group — cnitool, the plugin it is running, that plugin's IPAM plugin and
//! detached helpers — is killed at a moment of its ADD or its DEL, as when a runtime's
//! cgroup is killed. The runtime then comes back: `cnitool del` (with the cached result
//! if libcni cached one, without otherwise), then `cnitool gc` (DEL of every cached
//! attachment, GC of every plugin with an empty valid set). Both must succeed and the lab
//! must be back at its baseline, libcni's cache directory included.
//!
//! Moments as in `kill9.rs`: the median of three unkilled runs of the whole operation,
//! cut into `KS_KILL9_POINTS` (default 8) slices with one moment drawn in each by a seeded
//! generator (`KS_KILL9_SEED` repeats it). 2 verbs x 8 = 16 killed runs in CI.

use super::support;

use cni_testkit::kill::{count_from_env, run_killed_after, sweep, KillOutcome, SeededRng};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;
use support::*;

const SEED_VAR: &str = "KS_KILL9_SEED";
const NEVER: Duration = Duration::from_secs(3600);

struct Runtime {
    lab: Lab,
    netconf: tempfile::TempDir,
    cnitool: std::path::PathBuf,
}

impl Runtime {
    fn new() -> Runtime {
        let lab = Lab::new(1);
        let netconf = tempfile::Builder::new().prefix("ks-netconf-").tempdir().unwrap();
        let mut plugins: Vec<Value> = Vec::new();
        for step in [bridge(&lab), portmap(18200), firewall(), tuning(&lab), bandwidth()] {
            let mut conf = step.conf;
            let object = conf.as_object_mut().unwrap();
            object.remove("cniVersion");
            object.remove("name");
            // libcni passes the mappings in from the runtime (CAP_ARGS).
            if object.remove("runtimeConfig").is_some() {
                object.insert("capabilities".into(), json!({"portMappings": true}));
            }
            plugins.push(conf);
        }
        let list = json!({"cniVersion": VERSION, "name": NETWORK, "plugins": plugins});
        std::fs::write(netconf.path().join("ks.conflist"), serde_json::to_vec(&list).unwrap()).unwrap();
        let cnitool = cni_testkit::binaries::workspace_binary("cnitool", "cnitool");
        Runtime { lab, netconf, cnitool }
    }

    /// `cnitool <verb> ksnet <container>` as the lab's host would run it.
    fn command(&self, verb: &str) -> Command {
        let mut cmd = self.lab.host.command(&self.cnitool);
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("NETCONFPATH", self.netconf.path())
            .env("CNI_PATH", bin_dir())
            .env("CAP_ARGS", r#"{"portMappings":[{"hostPort":18200,"containerPort":80,"protocol":"tcp"}]}"#)
            .args([verb, NETWORK])
            .arg(self.lab.containers[0].path())
            .arg("--cache-dir")
            .arg(self.lab.dir("cache"));
        cmd
    }

    fn ok(&self, verb: &str) {
        let out = self.command(verb).output().unwrap();
        assert!(
            out.status.success(),
            "cnitool {verb} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `verb` killed `after` its start; ADD comes first for a killed DEL. Then DEL and GC.
    fn case(&self, verb: &str, after: Duration) -> KillOutcome {
        if verb == "del" {
            self.ok("add");
        }
        let outcome = run_killed_after(self.command(verb), b"", after);
        assert!(
            outcome.killed || outcome.completed(),
            "cnitool {verb} neither completed nor was killed: {outcome:?}"
        );
        self.ok("del");
        self.ok("gc");
        outcome
    }
}

#[test]
fn runtime_killed_during_a_chain_add_or_del() {
    let (mut rng, seed) = SeededRng::from_env(SEED_VAR);
    let points = count_from_env("KS_KILL9_POINTS", 8);
    let runtime = Runtime::new();
    runtime.ok("add");
    runtime.ok("del");
    runtime.ok("gc");
    let baseline = runtime.lab.settled_snapshot();
    for verb in ["add", "del"] {
        let mut timings: Vec<Duration> = (0..3).map(|_| runtime.case(verb, NEVER).elapsed).collect();
        timings.sort();
        let (mut killed, mut completed) = (0, 0);
        for after in sweep(&mut rng, timings[1], points) {
            let outcome = runtime.case(verb, after);
            if outcome.killed {
                killed += 1;
            } else {
                completed += 1;
            }
            let ending = if outcome.killed { "killed" } else { "completed first" };
            runtime.lab.assert_back_to(
                &format!("cnitool {verb} {ending} after {after:?} ({SEED_VAR}={seed})"),
                &baseline,
            );
        }
        println!(
            "{verb}: took {:?} unkilled; {points} points: {killed} killed, {completed} completed first",
            timings[1]
        );
        assert!(killed > 0, "{verb}: no run was killed");
    }
}
