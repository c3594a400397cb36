//! The 1.0.0 / 1.1.0 layout: the model itself. 1.0 and 1.1 differ only in the version
//! string (the reference carries the 1.1 fields through 1.0 unchanged).

use super::{CniResult, Interface, IpConfig, Route};
use crate::config::Dns;
use crate::version::Version;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub(super) struct ResultV1 {
    #[serde(rename = "cniVersion", default, skip_serializing_if = "String::is_empty")]
    cni_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ips: Vec<IpConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    dns: Dns,
}

impl From<ResultV1> for CniResult {
    fn from(r: ResultV1) -> CniResult {
        CniResult { interfaces: r.interfaces, ips: r.ips, routes: r.routes, dns: r.dns }
    }
}

impl ResultV1 {
    pub(super) fn from_model(model: &CniResult, version: Version) -> ResultV1 {
        ResultV1 {
            cni_version: version.to_string(),
            interfaces: model.interfaces.clone(),
            ips: model.ips.clone(),
            routes: model.routes.clone(),
            dns: model.dns.clone(),
        }
    }
}
