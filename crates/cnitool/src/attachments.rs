//! `list` and `inspect`: what libcni's result cache says is attached.

use crate::commands::{container_id, print_json, Context, Failure};
use libcni::NetworkAttachment;
use serde_json::{json, Value};

/// The addresses of a cached result, in whichever version it was cached: `ips[].address`
/// (0.3.0 and later) or `ip4.ip` / `ip6.ip` (0.1.0, 0.2.0). Anything else in the cache
/// (a damaged or foreign file) yields no addresses rather than an error: `list` is for
/// looking, and the rest of the entry is still worth showing.
pub fn result_ips(result: Option<&Value>) -> Vec<String> {
    let Some(result) = result else { return Vec::new() };
    let address = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    match result.get("ips").and_then(Value::as_array) {
        Some(ips) => ips.iter().filter_map(|ip| address(ip, "address")).collect(),
        None => {
            ["ip4", "ip6"].iter().filter_map(|k| result.get(*k)).filter_map(|ip| address(ip, "ip")).collect()
        }
    }
}

fn summary(a: &NetworkAttachment) -> Value {
    json!({
        "network": a.network,
        "containerId": a.container_id,
        "ifName": a.ifname,
        "netns": a.netns,
        "ips": result_ips(a.result.as_ref()),
        "cniArgs": a.cni_args,
        "capabilityArgs": a.capability_args,
        "result": a.result,
    })
}

pub fn list(ctx: &Context, network: Option<&str>) -> Result<(), Failure> {
    let attachments = ctx.cni.cached_attachments(None)?;
    let entries =
        attachments.iter().filter(|a| network.is_none_or(|n| a.network == n)).map(summary).collect();
    print_json(&Value::Array(entries));
    Ok(())
}

/// The container `wanted` names: an ID, a unique prefix of one, or the namespace path an
/// attachment was made with (cnitool derives its IDs from that path).
fn resolve<'a>(attachments: &'a [NetworkAttachment], wanted: &str) -> Result<&'a str, Failure> {
    let by_netns = attachments.iter().find(|a| !wanted.is_empty() && a.netns == wanted);
    let derived = wanted.starts_with('/').then(|| container_id(wanted));
    if let Some(a) = by_netns {
        return Ok(&a.container_id);
    }
    let mut ids: Vec<&str> = attachments.iter().map(|a| a.container_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    if let Some(id) = ids.iter().find(|id| **id == wanted || Some(**id) == derived.as_deref()) {
        return Ok(id);
    }
    let matches: Vec<&str> =
        ids.into_iter().filter(|id| !wanted.is_empty() && id.starts_with(wanted)).collect();
    match matches[..] {
        [id] => Ok(id),
        [] => Err(Failure(format!("no cached attachment of a container {wanted:?}"))),
        _ => Err(Failure(format!("{wanted:?} is a prefix of several container IDs: {}", matches.join(", ")))),
    }
}

pub fn inspect(ctx: &Context, wanted: &str) -> Result<(), Failure> {
    let attachments = ctx.cni.cached_attachments(None)?;
    let id = resolve(&attachments, wanted)?;
    let entries = attachments
        .iter()
        .filter(|a| a.container_id == id)
        .map(|a| {
            let mut entry = summary(a);
            // The configuration as cached: JSON when it is (it always is when libcni wrote
            // it), else its text, so a damaged entry can still be looked at.
            entry["config"] = serde_json::from_slice(&a.config)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&a.config).into_owned()));
            entry["cacheFile"] = json!(a.path.display().to_string());
            entry
        })
        .collect();
    print_json(&Value::Array(entries));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_of_every_result_shape() {
        let v1 =
            json!({"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/24"}, {"address": "fd00::2/64"}]});
        assert_eq!(result_ips(Some(&v1)), ["10.0.0.2/24", "fd00::2/64"]);
        let v02 = json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.3/24"}, "ip6": {"ip": "fd00::3/64"}});
        assert_eq!(result_ips(Some(&v02)), ["10.0.0.3/24", "fd00::3/64"]);
        for odd in [json!({}), json!({"ips": "x"}), json!({"ips": [5, {"address": 7}]}), json!([1])] {
            assert!(result_ips(Some(&odd)).is_empty(), "{odd}");
        }
        assert!(result_ips(None).is_empty());
    }

    fn attachment(id: &str, netns: &str) -> NetworkAttachment {
        NetworkAttachment {
            container_id: id.into(),
            network: "n".into(),
            ifname: "eth0".into(),
            config: Vec::new(),
            netns: netns.into(),
            cni_args: Vec::new(),
            capability_args: Default::default(),
            result: None,
            path: Default::default(),
        }
    }

    #[test]
    fn a_container_is_named_by_id_prefix_or_netns() {
        let all = [attachment("abc123", "/run/netns/a"), attachment("abd456", "/run/netns/b")];
        assert_eq!(resolve(&all, "abc123").unwrap(), "abc123");
        assert_eq!(resolve(&all, "abd").unwrap(), "abd456");
        assert_eq!(resolve(&all, "/run/netns/a").unwrap(), "abc123");
        assert!(resolve(&all, "ab").unwrap_err().0.contains("several"));
        assert!(resolve(&all, "zzz").unwrap_err().0.contains("no cached attachment"));
        assert!(resolve(&all, "").is_err());
        let derived = [attachment(&container_id("/run/netns/gone"), "/elsewhere")];
        assert_eq!(resolve(&derived, "/run/netns/gone").unwrap(), container_id("/run/netns/gone"));
    }
}
