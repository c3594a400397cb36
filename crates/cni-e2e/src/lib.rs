//! End-to-end tests of a CNI plugin directory driven by real container engines.
//!
//! The engines — podman 4.3 with its CNI backend, containerd's `ctr run --cni` and
//! containerd's CRI plugin (kubelet's path, `tests/it/cri.rs`) — run
//! inside an [`engine_host::EngineHost`]: a throwaway network namespace (where the engines
//! make their bridges, veths and firewall rules) plus a private mount namespace (where
//! their state, `/var/lib/cni`, `/run` and the CNI directories live). The machine's own
//! network namespace and podman/containerd state are never touched.
//!
//! Which plugins are tested is chosen by `CNI_E2E_PLUGIN_DIR` (see [`plugin_dir`]): by
//! default this workspace's `cni-plugins` binary installed into a temporary directory;
//! `CNI_E2E_PLUGIN_DIR=/usr/lib/cni` runs the same suite against the Go reference plugins.
//! The CRI suite runs every scenario on both sets itself.

pub mod containerd;
pub mod cri;
pub mod engine_host;
pub mod image;
pub mod net_text;
pub mod oracle;
pub mod plugin_dir;
pub mod podman;
pub mod process;

/// Prefix of every namespace and link name this suite creates outside its private namespaces.
pub const NAME_PREFIX: &str = "cne";
