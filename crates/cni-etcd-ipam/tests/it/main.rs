//! etcd-ipam's integration tests, one module per area, in one binary: the plugin and its
//! node agent as binaries against real etcd clusters on 127.0.0.1 (allocation, batching,
//! TLS, hostile members, quorum loss), the agent's socket, trace ids and metrics, and the
//! binary layout.

mod agent_socket;
mod agent_trace;
mod binary;
mod etcd_ipam;
mod etcd_ipam_batch;
mod metrics;
mod quorum_loss;
mod relay;
