//! host-local: its allocator and store as a library (store, held addresses, property tests,
//! concurrency between threads and processes, the Go plugin's files read and written), the
//! plugin through the multi-call binary, and directories planted by a local attacker.

mod concurrency;
mod go_interop;
mod held;
mod hostile_dir;
mod plugin;
mod proptest;
mod store;
mod support;
