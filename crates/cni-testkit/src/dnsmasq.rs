//! dnsmasq as a bare DHCP server for a test or bench network: the flags that keep it to
//! DHCP on one interface of a throwaway namespace, in the foreground, with no DNS, no
//! config file of the machine's and no ICMP probing. Callers add the ranges and options
//! of their network (and logging) and start it inside the server's namespace.

use std::path::Path;

/// Where Debian's `dnsmasq-base` installs it.
pub const BINARY: &str = "/usr/sbin/dnsmasq";

/// The flags for a foreground DHCP-only dnsmasq serving `interface`, keeping its leases
/// in `lease_file`.
pub fn dhcp_only_args(interface: &str, lease_file: &Path) -> Vec<String> {
    vec![
        "--no-daemon".into(),
        "--conf-file=/dev/null".into(),
        "--user=root".into(),
        "--group=root".into(),
        format!("--interface={interface}"),
        "--bind-interfaces".into(),
        "--except-interface=lo".into(),
        // No DNS service: the tests' resolvers are their own.
        "--port=0".into(),
        // An ICMP probe of each new address stalls dnsmasq for up to 3 s.
        "--no-ping".into(),
        format!("--dhcp-leasefile={}", lease_file.display()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_args_name_the_interface_and_the_lease_file_and_keep_dns_off() {
        let args = dhcp_only_args("srv0", Path::new("/tmp/x/leases"));
        assert!(args.contains(&"--interface=srv0".to_string()));
        assert!(args.contains(&"--dhcp-leasefile=/tmp/x/leases".to_string()));
        assert!(args.contains(&"--port=0".to_string()));
        assert!(args.contains(&"--conf-file=/dev/null".to_string()));
    }
}
