//! The bandwidth configuration, parsed and validated in one place before anything is
//! touched.
//!
//! Limits come from the plugin's own keys or from `runtimeConfig.bandwidth` (the
//! `bandwidth` capability). The runtime value is untrusted: in Kubernetes it is built from
//! the pod's annotations, which the pod's author writes. So the administrator's keys win,
//! exactly as in the reference plugin: as soon as the configuration has any of the four
//! limit keys (whatever their values, even 0 or null, even for the other direction), the
//! runtime value is ignored as a whole; it is used only when the configuration has none of
//! them. (The reference decides the same way: its configured limits are a struct that JSON
//! decoding creates when any of its keys is present, and only a missing one lets the
//! runtime's through.) An ignored runtime value is noted on stderr.
//!
//! "Has the key" is decided from the decoded configuration, never by looking the names up
//! in the raw JSON: keys match fields without regard to case (`"IngressRate"` is
//! `ingressRate`, as for Go's decoder), and a raw lookup of the exact names once let such a
//! configuration's limit be applied and, at the same time, the pod's value replace it.

use cni_sdk::{CniError, Request};
use serde::Deserialize;

/// One direction's limit: a rate in bits per second and a bucket in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub rate_bits: u64,
    pub burst_bits: u64,
}

/// What to shape. Ingress is traffic towards the container, egress traffic from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BandwidthConf {
    pub ingress: Option<Limit>,
    pub egress: Option<Limit>,
}

impl BandwidthConf {
    /// Nothing to shape: ADD passes the result through.
    pub fn is_unlimited(&self) -> bool {
        self.ingress.is_none() && self.egress.is_none()
    }
}

/// The keys as JSON has them (the same names in the configuration and in runtimeConfig).
/// Each is `None` when absent and `Some` when present, `Some(None)` if its value is null:
/// a key that is there counts as set whatever its value.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Entry {
    #[serde(default, rename = "ingressRate", deserialize_with = "present")]
    ingress_rate: Option<Option<u64>>,
    #[serde(default, rename = "ingressBurst", deserialize_with = "present")]
    ingress_burst: Option<Option<u64>>,
    #[serde(default, rename = "egressRate", deserialize_with = "present")]
    egress_rate: Option<Option<u64>>,
    #[serde(default, rename = "egressBurst", deserialize_with = "present")]
    egress_burst: Option<Option<u64>>,
}

/// A key that is there (serde calls this only then; `default` covers a missing one).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

impl Entry {
    /// Whether any limit key is there, however it was spelt and whatever its value.
    fn has_any_key(&self) -> bool {
        [self.ingress_rate, self.ingress_burst, self.egress_rate, self.egress_burst]
            .iter()
            .any(Option::is_some)
    }
}

/// A rate and burst given together (0 counts as unset, as in the reference), each at
/// least one byte, the burst under 4 GiB (the kernel keeps it in 32 bits).
fn limit(
    direction: &str,
    rate: Option<Option<u64>>,
    burst: Option<Option<u64>>,
    source: &str,
) -> Result<Option<Limit>, CniError> {
    let rate_key = format!("{source}{direction}Rate");
    let burst_key = format!("{source}{direction}Burst");
    let invalid = |key: &str, why: &str| Err(CniError::invalid_config(format!("bandwidth: {key}: {why}")));
    match (rate.flatten().unwrap_or(0), burst.flatten().unwrap_or(0)) {
        (0, 0) => Ok(None),
        (_, 0) => invalid(&burst_key, &format!("must be set when {rate_key} is set")),
        (0, _) => invalid(&rate_key, &format!("must be set when {burst_key} is set")),
        (rate, _) if rate < 8 => invalid(&rate_key, "must be at least 8 bits per second"),
        (_, burst) if burst < 8 => invalid(&burst_key, "must be at least 8 bits"),
        (_, burst) if burst / 8 >= u64::from(u32::MAX) => invalid(&burst_key, "cannot be more than 4GB"),
        (rate_bits, burst_bits) => Ok(Some(Limit { rate_bits, burst_bits })),
    }
}

fn from_entry(entry: &Entry, source: &str) -> Result<BandwidthConf, CniError> {
    Ok(BandwidthConf {
        ingress: limit("ingress", entry.ingress_rate, entry.ingress_burst, source)?,
        egress: limit("egress", entry.egress_rate, entry.egress_burst, source)?,
    })
}

/// Reads and validates the limits of a request.
pub fn load(req: &Request) -> Result<BandwidthConf, CniError> {
    let configured: Entry = req.config()?;
    let runtime: Option<Entry> = match req.conf.runtime_config("bandwidth") {
        None | Some(serde_json::Value::Null) => None,
        Some(value) => Some(cni_sdk::config::parse_value("runtimeConfig.bandwidth", value)?),
    };
    choose(&configured, runtime.as_ref())
}

/// The administrator's limits when the configuration has any limit key, else the
/// runtime's (validated either way, and only the one that applies).
fn choose(configured: &Entry, runtime: Option<&Entry>) -> Result<BandwidthConf, CniError> {
    match runtime {
        Some(runtime) if configured.has_any_key() => {
            if runtime.has_any_key() {
                eprintln!(
                    "bandwidth: ignoring runtimeConfig.bandwidth: the network configuration sets \
                     limits, and those are the ones applied"
                );
            }
            from_entry(configured, "")
        }
        Some(runtime) => from_entry(runtime, "runtimeConfig.bandwidth."),
        None => from_entry(configured, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<BandwidthConf, CniError> {
        let entry: Entry = serde_json::from_str(json).unwrap();
        from_entry(&entry, "")
    }

    #[test]
    fn both_directions() {
        let conf =
            parse(r#"{"ingressRate":8000000,"ingressBurst":80000,"egressRate":16000,"egressBurst":1600}"#)
                .unwrap();
        assert_eq!(conf.ingress, Some(Limit { rate_bits: 8_000_000, burst_bits: 80_000 }));
        assert_eq!(conf.egress, Some(Limit { rate_bits: 16_000, burst_bits: 1_600 }));
        assert!(parse("{}").unwrap().is_unlimited());
        assert!(parse(r#"{"ingressRate":0,"ingressBurst":0}"#).unwrap().is_unlimited());
    }

    #[test]
    fn rate_and_burst_come_together() {
        let err = parse(r#"{"ingressRate":1000}"#).unwrap_err();
        assert_eq!(err.code, 7);
        assert!(err.msg.contains("ingressBurst: must be set when ingressRate is set"), "{}", err.msg);
        let err = parse(r#"{"egressBurst":1000}"#).unwrap_err();
        assert!(err.msg.contains("egressRate: must be set when egressBurst is set"), "{}", err.msg);
    }

    fn entry(json: &str) -> Entry {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_runtime_value_applies_only_when_the_configuration_sets_no_limit_key() {
        let admin = entry(r#"{"ingressRate":1000000,"ingressBurst":100000}"#);
        let pod = entry(
            r#"{"ingressRate":40000000000,"ingressBurst":40000000,"egressRate":8000,"egressBurst":800}"#,
        );
        // The configuration wins as a whole: the pod gets no egress limit of its own either.
        let conf = choose(&admin, Some(&pod)).unwrap();
        assert_eq!(conf.ingress, Some(Limit { rate_bits: 1_000_000, burst_bits: 100_000 }));
        assert_eq!(conf.egress, None);
        // Keys present with 0 still count as set (the reference's rule): nothing is shaped.
        assert!(choose(&entry(r#"{"ingressRate":0}"#), Some(&pod)).unwrap().is_unlimited());
        // No limit key configured: the runtime's limits apply.
        let conf = choose(&Entry::default(), Some(&pod)).unwrap();
        assert_eq!(conf.egress, Some(Limit { rate_bits: 8_000, burst_bits: 800 }));
        // An ignored runtime value is not validated: it cannot fail the ADD either.
        assert!(choose(&admin, Some(&entry(r#"{"egressRate":5}"#))).is_ok());
        let err = choose(&Entry::default(), Some(&entry(r#"{"egressRate":5}"#))).unwrap_err();
        assert!(err.msg.contains("runtimeConfig.bandwidth.egressBurst"), "{}", err.msg);
    }

    /// An ADD of `conf` (a plugin configuration without `runtimeConfig`) with the pod's
    /// 40 Gbit/s ingress limit in runtimeConfig, decided by `load` as for a real request.
    fn load_with_pod_limit(conf: &str) -> BandwidthConf {
        let pod = r#""runtimeConfig":{"bandwidth":{"ingressRate":40000000000,"ingressBurst":400000000}}"#;
        let stdin = format!(r#"{{"cniVersion":"1.1.0","name":"n","type":"bandwidth",{pod},{conf}}}"#);
        let req = Request {
            command: cni_sdk::Command::Add,
            container_id: "ctr".into(),
            netns: "/run/netns/none".into(),
            ifname: "eth0".into(),
            args: Default::default(),
            path: vec![],
            stdin: stdin.as_bytes().to_vec(),
            conf: serde_json::from_str(&stdin).unwrap(),
            version: cni_sdk::Version::V1_1_0,
            trace: None,
        };
        load(&req).unwrap()
    }

    #[test]
    fn a_limit_key_counts_as_configured_however_it_is_spelt() {
        let admin = Limit { rate_bits: 1_000_000, burst_bits: 100_000 };
        for (rate, burst) in [
            ("ingressRate", "ingressBurst"),
            ("ingressrate", "ingressburst"),
            ("IngressRate", "IngressBurst"),
            ("INGRESSRATE", "INGRESSBURST"),
        ] {
            let conf = format!(r#""{rate}":1000000,"{burst}":100000"#);
            assert_eq!(load_with_pod_limit(&conf).ingress, Some(admin), "{conf}");
        }
        // Present with null is present (Go's decoder makes the struct for it too).
        assert!(load_with_pod_limit(r#""EgressRate":null"#).is_unlimited());
        // A key that is no limit key leaves the decision to the runtime value.
        let pod = load_with_pod_limit(r#""ingress":1"#).ingress;
        assert_eq!(pod.map(|l| l.rate_bits), Some(40_000_000_000));
    }

    #[test]
    fn sizes_are_bounded() {
        let err = parse(r#"{"egressRate":1000,"egressBurst":34359738360}"#).unwrap_err();
        assert!(err.msg.contains("egressBurst: cannot be more than 4GB"), "{}", err.msg);
        let err = parse(r#"{"ingressRate":7,"ingressBurst":100}"#).unwrap_err();
        assert!(err.msg.contains("ingressRate: must be at least 8"), "{}", err.msg);
        let err = parse(r#"{"ingressRate":700,"ingressBurst":7}"#).unwrap_err();
        assert!(err.msg.contains("ingressBurst: must be at least 8"), "{}", err.msg);
    }
}
