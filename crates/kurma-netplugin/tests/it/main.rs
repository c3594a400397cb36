//! kurma-netplugin's integration tests in one binary: the netplugin images built from this
//! workspace's binaries by [`common`], their bytes and formats, and their executables run
//! as the Kurma host runs them.

mod common;

mod executables;
mod images;
