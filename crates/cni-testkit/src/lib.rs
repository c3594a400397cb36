//! Test-only helpers shared across the workspace.
//!
//! - [`test_plugin`]: a scriptable plugin (binary `cni-test-plugin`) that returns a chosen
//!   result or error, sleeps, echoes `prevResult`, claims chosen versions, and records
//!   every invocation to a log that tests read back.
//! - [`runner`]: runs a plugin binary with a given environment and stdin, optionally
//!   inside a chosen network namespace, and decodes what it printed.
//! - [`ns`]: throwaway named network namespaces (`TestNetns`, `HostAndContainers`).
//! - [`traffic`]: TCP/UDP echo servers and clients across namespaces.
//! - [`snapshot`]: before/after snapshots of namespaces (links, addresses, routes, rules,
//!   qdiscs, nftables) and directories, to prove a refused request changed nothing.
//! - [`dnsmasq`]: dnsmasq's flags as a bare DHCP server on one interface.
//! - [`damage`]: state files emptied, cut short, garbage, or a directory in their place.
//! - [`kernel_rig`]: runs a test binary's rig-only tests under Debian's kernel in QEMU.
//! - [`kill`]: `kill -9` of a process group at a chosen moment; a seeded generator.
//! - [`socket_attack`]: a daemon's request socket attacked (as nobody, oversized, slow-loris).
//! - [`json_pointer`]: set or remove a key of a JSON document by JSON pointer.
//! - [`binaries`]: finds (building if needed) the workspace's binaries from a test.
//! - [`unprivileged`]: runs a shell script as `nobody`, the local attacker.
//! - [`capture`]: every frame on every interface of a namespace (`AF_PACKET`), kept for checks.
//! - [`poll`]: the one polling loop (`eventually`, `until`) for what happens in the background.
//! - [`scrape`]: a daemon's metrics endpoint scraped over TCP, its exposition text parsed.
//! - [`etcd`]: a throwaway etcd cluster on loopback, a throwaway PKI, a hostile etcd member.

pub mod binaries;
pub mod capture;
pub mod children;
pub mod cli;
pub mod damage;
pub mod dnsmasq;
pub mod docs;
pub mod etcd;
pub mod host_local;
pub mod json_pointer;
pub mod kernel_rig;
pub mod kill;
pub mod ns;
pub mod poll;
pub mod runner;
pub mod scrape;
pub mod snapshot;
pub mod socket_attack;
pub mod test_plugin;
pub mod traffic;
pub mod unprivileged;
