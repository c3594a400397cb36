//! The `slaac` IPAM plugin's configuration: how long to wait for a router.

use cni_sdk::{CniError, Request};
use serde::Deserialize;
use std::time::Duration;

/// Long enough for a router's answer to a solicitation (radvd waits up to 3.5 s between
/// answers) and for duplicate address detection (1 s by default) after it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A runtime waits for the whole ADD; an IPAM plugin may not hold it for minutes.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Deserialize)]
pub(crate) struct RawConf {
    ipam: RawIpamConf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawIpamConf {
    /// Seconds to wait for a usable autoconfigured address (fractions allowed).
    #[serde(default)]
    timeout: Option<f64>,
}

/// The validated configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlaacConf {
    pub timeout: Duration,
}

/// Parses and validates `ipam` of the request's configuration.
pub fn load(req: &Request) -> Result<SlaacConf, CniError> {
    let conf: RawConf = req.config()?;
    let timeout = match conf.ipam.timeout {
        None => DEFAULT_TIMEOUT,
        Some(seconds) => timeout_from_seconds(seconds)?,
    };
    Ok(SlaacConf { timeout })
}

fn timeout_from_seconds(seconds: f64) -> Result<Duration, CniError> {
    let max = MAX_TIMEOUT.as_secs_f64();
    if !seconds.is_finite() || seconds <= 0.0 || seconds > max {
        return Err(CniError::invalid_config(format!(
            "slaac: ipam.timeout: {seconds} is not a number of seconds above 0 and at most {max}"
        )));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_bounded() {
        assert_eq!(timeout_from_seconds(2.5).unwrap(), Duration::from_millis(2500));
        assert_eq!(timeout_from_seconds(60.0).unwrap(), MAX_TIMEOUT);
        for bad in [0.0, -1.0, 60.5, f64::NAN, f64::INFINITY] {
            let e = timeout_from_seconds(bad).unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
            assert!(e.msg.contains("ipam.timeout"), "{}", e.msg);
        }
    }
}
