//! The commands, on top of libcni.

use crate::cli::{parse_cni_args, Options};
use cni_types::{Version, VersionInfo};
use libcni::{Attachment, CniConfig, NetworkConfigList, RuntimeConf};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha512};
use std::path::{Component, Path, PathBuf};

/// A failure to report: a message for stderr.
#[derive(Debug)]
pub struct Failure(pub String);

impl From<libcni::Error> for Failure {
    fn from(e: libcni::Error) -> Failure {
        Failure(e.to_string())
    }
}

/// What every command reads from the environment and the options.
pub struct Context {
    pub netconf_dir: PathBuf,
    pub cni: CniConfig,
    pub ifname: String,
    pub options: Options,
}

impl Context {
    pub fn from_env(options: Options) -> Context {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let netconf_dir = PathBuf::from(var("NETCONFPATH").unwrap_or_else(|| "/etc/cni/net.d".into()));
        let cache_dir = options.cache_dir.clone().or_else(|| var("CNI_CACHE_DIR"));
        let mut cni = CniConfig::from_path_list(&var("CNI_PATH").unwrap_or_default());
        if let Some(dir) = cache_dir {
            cni = cni.with_cache_dir(dir);
        }
        if let Some(timeout) = options.timeout {
            cni = cni.with_timeout(timeout);
        }
        let ifname = options.ifname.clone().or_else(|| var("CNI_IFNAME")).unwrap_or_else(|| "eth0".into());
        Context { netconf_dir, cni, ifname, options }
    }

    fn load(&self, network: &str) -> Result<NetworkConfigList, Failure> {
        Ok(libcni::load_network(&self.netconf_dir, network)?)
    }

    /// The attachment as the reference cnitool describes it.
    fn runtime_conf(&self, netns: &str) -> Result<RuntimeConf, Failure> {
        let netns = absolute(Path::new(netns)).map_err(|e| Failure(format!("netns path {netns:?}: {e}")))?;
        let netns = netns.display().to_string();
        let mut rt = RuntimeConf::new(container_id(&netns), netns, &self.ifname);
        if let Ok(text) = std::env::var("CNI_ARGS") {
            rt.args = parse_cni_args(&text).map_err(Failure)?;
        }
        if let Some(text) = std::env::var("CAP_ARGS").ok().filter(|t| !t.is_empty()) {
            rt.capability_args = serde_json::from_str::<Map<String, Value>>(&text)
                .map_err(|e| Failure(format!("CAP_ARGS is not a JSON object: {e}")))?;
        }
        Ok(rt)
    }
}

/// `cnitool-` + the first 20 hex digits of sha512(netns path).
pub fn container_id(netns: &str) -> String {
    let digest = Sha512::digest(netns.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("cnitool-{}", &hex[..20])
}

/// The path made absolute and cleaned lexically (`.` and `..` resolved without following
/// symlinks), like Go's `filepath.Abs`.
fn absolute(path: &Path) -> std::io::Result<PathBuf> {
    let joined = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir()?.join(path) };
    let mut clean = PathBuf::from("/");
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                clean.pop();
            }
            Component::Normal(p) => clean.push(p),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(clean)
}

pub fn print_json(value: &Value) {
    println!("{}", serde_json::to_string_pretty(value).expect("JSON values serialise"));
}

pub fn add(ctx: &Context, network: &str, netns: &str) -> Result<(), Failure> {
    let list = ctx.load(network)?;
    let result = ctx.cni.add_network_list(&list, &ctx.runtime_conf(netns)?)?;
    print_json(&result.json);
    Ok(())
}

pub fn check(ctx: &Context, network: &str, netns: &str) -> Result<(), Failure> {
    let list = ctx.load(network)?;
    Ok(ctx.cni.check_network_list(&list, &ctx.runtime_conf(netns)?)?)
}

pub fn del(ctx: &Context, network: &str, netns: &str) -> Result<(), Failure> {
    let list = ctx.load(network)?;
    Ok(ctx.cni.del_network_list(&list, &ctx.runtime_conf(netns)?)?)
}

pub fn gc(ctx: &Context, network: &str) -> Result<(), Failure> {
    let list = ctx.load(network)?;
    let keep: Vec<Attachment> = ctx
        .options
        .keep
        .iter()
        .map(|(id, ifname)| Attachment {
            container_id: id.clone(),
            ifname: ifname.clone().unwrap_or_else(|| ctx.ifname.clone()),
        })
        .collect();
    Ok(ctx.cni.gc_network_list(&list, &keep)?)
}

pub fn status(ctx: &Context, network: &str) -> Result<(), Failure> {
    let list = ctx.load(network)?;
    Ok(ctx.cni.status_network_list(&list)?)
}

pub fn version(ctx: &Context, plugin_type: Option<&str>) -> Result<(), Failure> {
    let info = match plugin_type {
        Some(plugin_type) => ctx.cni.get_version_info(plugin_type)?,
        None => {
            let ours = VersionInfo {
                cni_version: Version::LATEST.to_string(),
                supported_versions: Version::ALL.iter().map(ToString::to_string).collect(),
            };
            let mut value = serde_json::to_value(ours).expect("version info serialises");
            value["cnitool"] = json!(env!("CARGO_PKG_VERSION"));
            print_json(&value);
            return Ok(());
        }
    };
    print_json(&serde_json::to_value(info).expect("version info serialises"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_id_matches_the_reference_derivation() {
        // printf %s /var/run/netns/testing | sha512sum | cut -c1-20
        assert_eq!(container_id("/var/run/netns/testing"), "cnitool-77383ca0a0715733ca6f");
    }

    #[test]
    fn paths_are_made_absolute_lexically() {
        assert_eq!(absolute(Path::new("/run/netns/../netns/./x")).unwrap(), PathBuf::from("/run/netns/x"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute(Path::new("x")).unwrap(), cwd.join("x"));
    }
}
