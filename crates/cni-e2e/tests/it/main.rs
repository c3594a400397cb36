//! The end-to-end suite in one binary, a module per engine path: podman's CNI backend (and
//! with DNS), containerd's `ctr run --cni`, containerd's CRI plugin as kubelet drives it,
//! a node swapped from the Go reference plugins to ours under both engines, and one handed
//! back to them under podman (`cnitool handover`). Each
//! test starts its engine inside its own throwaway network and mount namespaces.

mod containerd;
mod cri;
mod podman;
mod podman_dns;
mod podman_rollback;
mod swap;
