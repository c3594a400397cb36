//! `overlay-scale`: its command line, and a small simulation run end to end.

mod cli;
mod simulation;
