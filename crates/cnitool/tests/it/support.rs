//! What several of cnitool's integration tests share.

use std::process::Output;

/// cnitool's stdout, after asserting it succeeded (its output in the message otherwise).
pub fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "cnitool failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
