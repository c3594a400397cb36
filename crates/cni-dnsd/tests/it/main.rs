//! cni-dnsd's integration tests, one module per area, in one binary: the dnsname plugin
//! and its resolver on test networks built by [`support`] (records, forwarding, damaged
//! state, metrics, who may ask), the control socket, systemd socket activation and the command line.

mod support;

mod activation;
mod cli;
mod clients;
mod control_socket;
mod damage;
mod dnsname;
mod forwarding;
mod metrics;
