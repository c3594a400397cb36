//! `overlay-scale`'s integration tests in one binary: its command line, and a small
//! simulation run end to end.
#![forbid(unsafe_code)]

mod cli;
mod simulation;
