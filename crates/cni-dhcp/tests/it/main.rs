//! The dhcp plugin's integration tests, one module per area, in one binary: the plugin and
//! its lease daemon against real DHCP servers (dnsmasq, kea) and scripted fake ones on
//! networks built by [`support`] from the plugin directory of [`common`], DHCPv6, the
//! daemon's socket and metrics, and the `dhcp` binary's command line.

mod common;
mod support;

mod cli;
mod dhcp;
mod fake_server;
mod fake_server6;
mod metrics;
mod socket;
mod v6;
