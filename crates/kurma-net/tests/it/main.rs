//! kurma-net's integration tests, one module per area, in one binary: netplugin images run
//! in a throwaway "host" namespace built by [`common`] (end to end, concurrency, failures,
//! hostile image sources, the state tree) and the command line.

mod common;

mod cli;
mod concurrency;
mod end_to_end;
mod failures;
mod hostile_sources;
mod state_tree;
