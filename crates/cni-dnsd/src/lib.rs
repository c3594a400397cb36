//! `cni-dnsd`: the resolver behind the `dnsname` plugin. One process serves every network:
//! it answers on each network's gateway address (port 53, UDP and TCP), authoritatively for
//! the network's domain from the records the plugin writes, and forwards everything else to
//! upstream servers. Threads, no async runtime: the load is a few containers' lookups.

pub mod answer;
pub mod caps;
pub mod forward;
pub mod metrics;
pub mod server;
pub mod sockets;
pub mod zone;
