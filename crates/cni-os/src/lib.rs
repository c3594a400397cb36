//! Operating-system primitives every cni-rs crate shares, each with one behaviour.
//!
//! State files and directories of plugins and daemons live in places another local user
//! may be able to reach (a misconfigured `dataDir`, an old install's 0755 tree). The rules
//! here are the one answer to that for the whole workspace (see docs/security.md):
//!
//! - a state file is written whole or not at all ([`fs::write_atomic`]): a temporary file
//!   created exclusively, never through a symbolic link, with its mode set at creation,
//!   then renamed over the target (a rename replaces a link, it never follows one);
//! - a state file is read without following a link ([`fs::open_nofollow`]);
//! - a private directory is 0700 and ours ([`fs::private_dir`]): one that another user
//!   owns, or a link in its place, is refused rather than used;
//! - a daemon's request socket is root's alone and bounded in size, time and concurrency
//!   ([`socket`]).
//!
//!
//! This crate is the only home of `unsafe` code in the workspace: the workspace lints
//! forbid it in every other crate (and in every test, bench, example and build script),
//! which call the safe functions here. They prefer `rustix`'s typed system calls and fall
//! back to `libc` only where rustix has no call or only an unsafe one (SO_BINDTODEVICE,
//! packet information with recvmsg, link-layer addresses, netlink socket options, the
//! namespace and tun ioctls, `unshare`, wait4, signal handlers, hooks between fork and
//! exec). Here `unsafe_code` is denied, and each `unsafe` block is allowed where it stands
//! and states why it is sound; [`detach`], a process that shares this one's memory, is
//! allowed as a whole module.

pub mod child;
// A raw process primitive from end to end (a clone sharing this process's memory, system
// calls without libc, its own stack mapping): allowed as one module, every block still
// with its own `// SAFETY:` note.
#[allow(unsafe_code)]
pub mod detach;
pub mod fs;
pub mod idempotent;
pub mod inet;
pub mod lock;
pub mod namespace;
pub mod netlink;
pub mod poll;
pub mod privileges;
pub mod process;
// System calls without libc, shared by `detach` and `relay`.
pub mod random;
#[allow(unsafe_code)]
mod raw;
// The relay runs before libc has started: raw system calls, its own mapping, an entry
// point in assembly. Allowed as one module, every block with its own `// SAFETY:` note.
#[allow(unsafe_code)]
pub mod relay;
pub mod signal;
pub mod socket;
pub mod tun;

pub use idempotent::Idempotent;

/// Whether this process runs with root's effective user id.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}
