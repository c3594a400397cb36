//! Reading, changing, restoring and checking the container-side values tuning manages:
//! sysctls (through `/proc/sys` on a thread inside the namespace) and link attributes
//! (through a netlink socket bound to the namespace).

use super::config::{SysctlSetting, TuningConf};
use super::state::Originals;
use crate::common::rollback::{Rollback, Undo};
use crate::common::NetResultExt;
use cni_net::Idempotent;
use cni_net::{sysctl, Link, MacAddr, NetNs, Netlink};
use cni_sdk::CniError;

/// Sysctl values compare equal when their words do: the kernel prints some multi-value
/// keys (`tcp_rmem`) with tabs where the configuration has spaces.
fn same_value(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

/// Reads every configured sysctl in the container. A key that cannot be read does not
/// exist there: that is a configuration error naming the key, found before any change.
fn read_sysctls(ns: &NetNs, settings: &[SysctlSetting]) -> Result<Vec<String>, CniError> {
    let keys: Vec<&str> = settings.iter().map(|s| s.key.as_str()).collect();
    let results =
        ns.run(|| keys.iter().map(|k| sysctl::read(k)).collect::<Vec<_>>()).or_cni("enter the container")?;
    settings
        .iter()
        .zip(results)
        .map(|(s, r)| {
            r.map_err(|e| {
                let code = if e.is_not_found() {
                    cni_sdk::ErrorCode::InvalidConfig
                } else {
                    cni_sdk::ErrorCode::Internal
                };
                CniError::new(
                    code,
                    format!("tuning: sysctl {}: cannot read {}: {e}", s.configured_key, s.key),
                )
            })
        })
        .collect()
}

/// Writes sysctls in order inside the container; on failure, how many were written and
/// the error.
fn write_sysctls(ns: &NetNs, values: &[(String, String)]) -> Result<(), (usize, String)> {
    let outcome = ns.run(|| {
        for (i, (key, value)) in values.iter().enumerate() {
            if let Err(e) = sysctl::write(key, value) {
                return Err((i, format!("set sysctl {key}={value}: {e}")));
            }
        }
        Ok(())
    });
    outcome.map_err(|e| (0, format!("enter the container: {e}")))?
}

/// The container interface; required when a link attribute is to be changed or checked.
pub fn container_link(nl: &mut Netlink, ifname: &str) -> Result<Link, CniError> {
    nl.link_by_name(ifname)
        .or_cni("look up the container interface")?
        .ok_or_else(|| CniError::internal(format!("tuning: interface {ifname} not found in the container")))
}

/// What ADD is about to replace: the current value of everything `conf` changes.
pub fn read_originals(ns: &NetNs, link: Option<&Link>, conf: &TuningConf) -> Result<Originals, CniError> {
    let mut originals = Originals::default();
    for (setting, value) in conf.sysctls.iter().zip(read_sysctls(ns, &conf.sysctls)?) {
        originals.sysctl.insert(setting.key.clone(), value);
    }
    if let Some(link) = link {
        if conf.mac.is_some() {
            originals.mac = link.mac.map(|m| m.to_string()).unwrap_or_default();
        }
        if conf.mtu.is_some() {
            originals.mtu = link.mtu;
        }
        originals.promisc = conf.promisc.map(|_| link.promisc);
        originals.allmulti = conf.allmulti.map(|_| link.allmulti);
        originals.tx_qlen = conf.tx_qlen.and(link.txqlen);
    }
    Ok(originals)
}

/// The originals of what an ADD changed so far: a [`Rollback`] of them leaves the
/// container as it found it when the ADD fails halfway (or panics).
struct Changed<'a> {
    ns: &'a NetNs,
    ifname: &'a str,
    done: Originals,
}

impl Undo for Changed<'_> {
    fn undo(&mut self) {
        if !self.done.is_empty() {
            for e in restore(self.ns, self.ifname, &self.done) {
                eprintln!("tuning: rollback: {e}");
            }
        }
    }
}

/// Applies `conf`, recording each change's original from `originals` as it goes so a
/// failure restores exactly what was changed.
pub fn apply(
    ns: &NetNs,
    nl: &mut Netlink,
    ifname: &str,
    link: Option<&Link>,
    conf: &TuningConf,
    originals: &Originals,
) -> Result<(), CniError> {
    let mut rollback = Rollback::new(Changed { ns, ifname, done: Originals::default() });
    let values: Vec<(String, String)> =
        conf.sysctls.iter().map(|s| (s.key.clone(), s.value.clone())).collect();
    if let Err((written, msg)) = write_sysctls(ns, &values) {
        // The failed write may have partly applied; restore it too.
        for (key, _) in values.iter().take(written + 1) {
            if let Some(orig) = originals.sysctl.get(key) {
                rollback.done.sysctl.insert(key.clone(), orig.clone());
            }
        }
        return Err(CniError::internal(format!("tuning: {msg}")));
    }
    rollback.done.sysctl = originals.sysctl.clone();

    if let Some(link) = link {
        let fail = |what: &str, e: cni_net::Error| {
            CniError::internal(format!("tuning: set {what} of {ifname}: {e}"))
        };
        if let Some(mac) = conf.mac {
            rollback.done.mac = originals.mac.clone();
            nl.set_link_mac(link.index, mac).map_err(|e| fail("MAC address", e))?;
        }
        if let Some(on) = conf.promisc {
            rollback.done.promisc = originals.promisc;
            nl.set_link_promisc(link.index, on).map_err(|e| fail("promiscuous mode", e))?;
        }
        if let Some(mtu) = conf.mtu {
            rollback.done.mtu = originals.mtu;
            nl.set_link_mtu(link.index, mtu).map_err(|e| fail("MTU", e))?;
        }
        if let Some(on) = conf.allmulti {
            rollback.done.allmulti = originals.allmulti;
            nl.set_link_allmulti(link.index, on).map_err(|e| fail("all-multicast mode", e))?;
        }
        if let Some(len) = conf.tx_qlen {
            rollback.done.tx_qlen = originals.tx_qlen;
            nl.set_link_txqlen(link.index, len).map_err(|e| fail("txQLen", e))?;
        }
    }
    rollback.keep();
    Ok(())
}

/// Puts back what `record` holds; returns the failures (an interface or key that no
/// longer exists is not one: there is nothing left to restore).
pub fn restore(ns: &NetNs, ifname: &str, record: &Originals) -> Vec<String> {
    let mut errors = Vec::new();
    if record.mac.is_empty()
        && record.mtu == 0
        && record.promisc.is_none()
        && record.allmulti.is_none()
        && record.tx_qlen.is_none()
    {
        // Only sysctls: no link needed.
    } else {
        match Netlink::in_ns(ns).and_then(|mut nl| nl.link_by_name(ifname).map(|l| (nl, l))) {
            Err(e) => errors.push(format!("look up {ifname}: {e}")),
            Ok((_, None)) => {}
            Ok((mut nl, Some(link))) => {
                let mac = if record.mac.is_empty() {
                    None
                } else {
                    match record.mac.parse::<MacAddr>() {
                        Ok(mac) => Some(mac),
                        Err(e) => {
                            errors.push(format!("restore MAC address of {ifname}: {e}"));
                            None
                        }
                    }
                };
                let mut attempt = |what: &str, r: cni_net::Result<()>| {
                    if let Err(e) = r.ignore_missing() {
                        errors.push(format!("restore {what} of {ifname}: {e}"));
                    }
                };
                // MTU before MAC, as the reference restores them.
                if record.mtu != 0 {
                    attempt("MTU", nl.set_link_mtu(link.index, record.mtu));
                }
                if let Some(mac) = mac {
                    attempt("MAC address", nl.set_link_mac(link.index, mac));
                }
                if let Some(on) = record.promisc {
                    attempt("promiscuous mode", nl.set_link_promisc(link.index, on));
                }
                if let Some(on) = record.allmulti {
                    attempt("all-multicast mode", nl.set_link_allmulti(link.index, on));
                }
                if let Some(len) = record.tx_qlen {
                    attempt("txQLen", nl.set_link_txqlen(link.index, len));
                }
            }
        }
    }
    if !record.sysctl.is_empty() {
        let values: Vec<(&String, &String)> = record.sysctl.iter().collect();
        match ns.run(|| values.iter().map(|(k, v)| sysctl::write(k, v)).collect::<Vec<_>>()) {
            Err(e) => errors.push(format!("enter the container: {e}")),
            Ok(results) => {
                for ((key, value), r) in values.iter().zip(results) {
                    if let Err(e) = r.ignore_missing() {
                        errors.push(format!("restore sysctl {key}={value}: {e}"));
                    }
                }
            }
        }
    }
    errors
}

/// CHECK: every configured value is what the container has now; the error names the
/// first that differs.
pub fn check(ns: &NetNs, nl: &mut Netlink, ifname: &str, conf: &TuningConf) -> Result<(), CniError> {
    for (setting, actual) in conf.sysctls.iter().zip(read_sysctls(ns, &conf.sysctls)?) {
        if !same_value(&actual, &setting.value) {
            return Err(CniError::internal(format!(
                "tuning: sysctl {} is {actual:?}, configured {:?}",
                setting.key, setting.value
            )));
        }
    }
    if !conf.changes_link() {
        return Ok(());
    }
    let link = container_link(nl, ifname)?;
    let differs = |what: &str, actual: String, configured: String| {
        Err(CniError::internal(format!("tuning: {what} of {ifname} is {actual}, configured {configured}")))
    };
    if let Some(mac) = conf.mac {
        if link.mac != Some(mac) {
            return differs(
                "MAC address",
                link.mac.map(|m| m.to_string()).unwrap_or_default(),
                mac.to_string(),
            );
        }
    }
    if let Some(mtu) = conf.mtu {
        if link.mtu != mtu {
            return differs("MTU", link.mtu.to_string(), mtu.to_string());
        }
    }
    if let Some(on) = conf.promisc {
        if link.promisc != on {
            return differs("promiscuous mode", link.promisc.to_string(), on.to_string());
        }
    }
    if let Some(on) = conf.allmulti {
        if link.allmulti != on {
            return differs("all-multicast mode", link.allmulti.to_string(), on.to_string());
        }
    }
    if let Some(len) = conf.tx_qlen {
        if link.txqlen != Some(len) {
            return differs(
                "txQLen",
                link.txqlen.map(|l| l.to_string()).unwrap_or_default(),
                len.to_string(),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sysctl_values_compare_by_words() {
        assert!(super::same_value("4096\t87380\t6291456", "4096 87380  6291456"));
        assert!(!super::same_value("1", "0"));
    }
}
