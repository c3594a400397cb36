//! The overlay's integration tests, one module per area, in one binary: the agent's
//! command line, the kernel dataplane alone, and clusters of hosts (network namespaces on
//! an underlay bridge) on a real etcd built by [`harness`]. Most need root and Debian's
//! etcd-server. The WireGuard backend's tests are in `kernel_wireguard`, a binary of its
//! own run inside the kernel rig.

mod harness;

mod cli;
mod dataplane;
mod direct_routes;
mod dual_stack;
mod etcd_member_loss;
mod hostile_peers;
mod metrics;
mod three_hosts;
