//! cni-testkit's own tests (its helpers on the real kernel; needs root), and the checks
//! that keep the repository's documentation true: workspace-wide checks live here because
//! the test kit is the one crate every test already builds.

mod ns_lifecycle;
mod repo;
mod repo_dependencies;
mod repo_docs;
mod repo_lints;
mod snapshot;
mod test_plugin;
