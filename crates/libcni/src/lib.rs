//! The CNI runtime library: what a container engine embeds to attach containers to
//! networks.
//!
//! - [`config`]: find and load network configurations (`*.conflist`, `*.conf`, sibling
//!   plugin files), pick the version to speak, validate with errors that name the file and
//!   the field.
//! - [`CniConfig`]: run ADD / CHECK / DEL / GC / STATUS for a list or a single plugin
//!   configuration, ask a plugin its versions, validate a list. Synchronous and usable from
//!   many threads at once.
//! - [`cache`]: the result cache in the reference's format and place, written atomically.
//!
//! ```no_run
//! use libcni::{load_network, CniConfig, RuntimeConf};
//! let list = load_network("/etc/cni/net.d", "podman")?;
//! let cni = CniConfig::new(["/opt/cni/bin"]);
//! let rt = RuntimeConf::new("ctr1", "/run/netns/ctr1", "eth0").with_arg("IgnoreUnknown", "1");
//! let result = cni.add_network_list(&list, &rt)?;
//! println!("{}", result.json);
//! cni.del_network_list(&list, &rt)?;
//! # Ok::<(), libcni::Error>(())
//! ```

pub mod cache;
pub mod config;
pub mod error;
pub mod exec;
#[doc(hidden)]
pub mod fuzzing;
mod maintenance;
mod request;
mod runtime;

pub use cache::NetworkAttachment;
pub use cni_types::{Attachment, TraceContext};
pub use config::{conf_files, load_network, NetworkConfig, NetworkConfigList, MAX_CONF_BYTES};
pub use error::{Error, Result};
pub use exec::find_plugin;
pub use request::RuntimeConf;
pub use runtime::{CniConfig, NetworkResult};
