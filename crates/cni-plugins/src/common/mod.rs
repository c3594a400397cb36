//! Pieces more than one plugin uses: turning cni-net errors into CNI errors, opening the
//! container's namespace, veth pairs with a rollback guard, putting an IPAM result on an
//! interface and checking that it is still there (interface plugins), per-attachment
//! nftables chains and masquerading (interface and meta plugins alike).

pub mod addresses;
pub mod container_link;
pub mod iface;
pub mod iptables;
pub mod masq;
pub mod nft_attach;
pub mod records;
pub mod reference_state;
pub mod rollback;
pub mod sublink;
pub mod veth;

use cni_net::NetNs;
use cni_sdk::{CniError, ErrorCode, Request};

/// Attaches CNI meaning to cni-net failures.
pub trait NetResultExt<T> {
    /// An unexpected kernel failure: code 999 with what was being done.
    fn or_cni(self, what: &str) -> Result<T, CniError>;
}

impl<T> NetResultExt<T> for Result<T, cni_net::Error> {
    fn or_cni(self, what: &str) -> Result<T, CniError> {
        self.map_err(|e| CniError::internal(format!("{what}: {e}")))
    }
}

/// Opens CNI_NETNS. A namespace that does not exist is "container unknown" (code 3): the
/// runtime has nothing to clean up for it.
pub fn open_container_netns(req: &Request) -> Result<NetNs, CniError> {
    let Some(path) = req.netns_path() else {
        return Err(CniError::new(ErrorCode::InvalidEnvironment, "CNI_NETNS is required"));
    };
    NetNs::open(path).map_err(|e| {
        // A path that exists but is no network namespace (a regular file, a PID namespace)
        // is the runtime's mistake, not the plugin's: "invalid network namespace".
        let not_a_netns = matches!(&e, cni_net::Error::Namespace { source, .. }
            if source.kind() == std::io::ErrorKind::InvalidInput);
        let code = if e.is_not_found() {
            ErrorCode::UnknownContainer
        } else if not_a_netns {
            ErrorCode::InvalidNetNs
        } else {
            ErrorCode::Internal
        };
        CniError::new(code, format!("failed to open netns {path:?}: {e}"))
    })
}

/// Opens CNI_NETNS for DEL: `None` when there is none or it is already gone, since DEL of
/// a vanished container must still succeed.
pub fn open_container_netns_for_del(req: &Request) -> Result<Option<NetNs>, CniError> {
    match req.netns_path() {
        None => Ok(None),
        Some(_) => match open_container_netns(req) {
            Ok(ns) => Ok(Some(ns)),
            Err(e) if e.is(ErrorCode::UnknownContainer) => Ok(None),
            Err(e) => Err(e),
        },
    }
}

/// Random bytes from the kernel (for interface names). A signal interrupting the call is
/// retried; any other failure (a seccomp filter refusing the syscall, say) is returned,
/// since retrying it would loop forever.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], CniError> {
    cni_os::random::bytes().map_err(|e| CniError::internal(format!("getrandom: {e}")))
}

/// Routing on the host between container interfaces and the rest (v4 or v6).
pub fn enable_forwarding(v4: bool) -> Result<(), CniError> {
    let key = if v4 { "net.ipv4.ip_forward" } else { "net.ipv6.conf.all.forwarding" };
    if cni_net::sysctl::read(key).map(|v| v.trim() == "1").unwrap_or(false) {
        return Ok(());
    }
    cni_net::sysctl::write(key, "1").or_cni(&format!("enable {key}"))
}

/// DEL of a plugin that made one container link and had IPAM address it: the link goes
/// (`delete_link`), then the IPAM release runs whatever happened to it, so damaged IPAM
/// state cannot keep the link alive; failures are reported together. An IPAM plugin that
/// talks over the interface (dhcp) is released first, while the link is still there.
pub fn del_link_and_ipam(
    req: &cni_sdk::Request,
    delete_link: impl FnOnce(&cni_sdk::Request) -> Result<(), CniError>,
) -> Result<(), CniError> {
    use cni_sdk::delegate;
    let mut errors = DelErrors::new();
    let ipam_first = delegate::ipam_needs_interface(req);
    if ipam_first {
        errors.record("the IPAM plugin's allocations", delegate::ipam_forward_if_configured(req));
    }
    errors.record("the container's interface", delete_link(req));
    if !ipam_first {
        errors.record("the IPAM plugin's allocations", delegate::ipam_forward_if_configured(req));
    }
    errors.into_result()
}

/// The failures of one DEL. A DEL that stops at its first failure leaves everything after
/// it behind (a runtime then retries the DEL, often forever, while the host veth lingers),
/// so every step runs and the failures are reported together at the end.
#[derive(Debug, Default)]
pub struct DelErrors(Vec<(String, CniError)>);

impl DelErrors {
    pub fn new() -> DelErrors {
        DelErrors::default()
    }

    /// Keeps `result`'s error, if any, as a failure to remove `object`.
    pub fn record(&mut self, object: impl Into<String>, result: Result<(), CniError>) {
        if let Err(error) = result {
            self.0.push((object.into(), error));
        }
    }

    /// One CNI error naming every object that could not be removed: a single failure
    /// keeps its own code, several keep their common code or become 999; `details` gives
    /// each failure on its own line.
    pub fn into_result(self) -> Result<(), CniError> {
        match self.0.as_slice() {
            [] => Ok(()),
            [(object, error)] => {
                Err(CniError::new(error.code, format!("DEL could not remove {object}: {}", error.msg))
                    .with_details(error.details.clone()))
            }
            many => {
                let first = many[0].1.code;
                let code = if many.iter().all(|(_, e)| e.code == first) {
                    first
                } else {
                    ErrorCode::Internal.as_u32()
                };
                let objects: Vec<&str> = many.iter().map(|(o, _)| o.as_str()).collect();
                let details: Vec<String> = many.iter().map(|(o, e)| format!("{o}: {}", e.msg)).collect();
                Err(CniError::new(code, format!("DEL could not remove {}", objects.join(", ")))
                    .with_details(details.join("\n")))
            }
        }
    }
}
