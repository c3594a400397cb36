//! What the relay and the agent say to each other: the request line the relay builds
//! (before libc: volatile byte copies, nothing allocated) and the answer's shape, which
//! the agent writes with [`answer`] and the relay reads back exactly.

use core::ptr::{read_volatile, write_volatile};

use super::{scan, Process};

/// What an agent's answer to a relayed request starts with.
pub const ANSWER_PREFIX: &str = "CNI-RS-RELAY";

/// The `op` of a relayed request.
pub const RUN_OP: &str = "run";

/// The agent's answer to a relayed request: the plugin's exit status and output.
pub fn answer(exit: i32, stdout: &[u8], stderr: &[u8]) -> Vec<u8> {
    let mut out = format!("{ANSWER_PREFIX} {exit} {} {}\n", stdout.len(), stderr.len()).into_bytes();
    out.extend_from_slice(stdout);
    out.extend_from_slice(stderr);
    out
}

/// The variables a relayed request carries: those the plugin SDK reads.
#[inline(always)]
pub(super) fn forwarded(name: &[u8]) -> bool {
    let cni = name.get(..4).is_some_and(|p| scan::same(p, b"CNI_"));
    cni || scan::same(name, b"TRACEPARENT") || scan::same(name, b"TRACESTATE") || scan::same(name, b"BAGGAGE")
}

/// The request line in `area`.
#[inline(always)]
pub(super) fn build_request<'a>(process: &Process, config: &[u8], area: &'a mut [u8]) -> Option<&'a [u8]> {
    let mut out = Writer { area, len: 0 };
    let mut ok = out.push(b"{\"op\":\"run\",\"env\":{");
    let mut first = true;
    let plain = process.each_env(|name, value| {
        if !forwarded(name) {
            return true;
        }
        // Names and values go into JSON strings as they are: only what needs no escape.
        let name_ok = all(name, |b| b.is_ascii_alphanumeric() || b == b'_');
        let value_ok = all(value, |b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
        if !name_ok || !value_ok {
            return false;
        }
        ok &= (first || out.push(b",")) && out.push(b"\"") && out.push(name) && out.push(b"\":\"");
        ok &= out.push(value) && out.push(b"\"");
        first = false;
        true
    });
    if !plain {
        return None;
    }
    ok &= out.push(b"},\"config\":");
    let at = out.len;
    ok &= out.push(config);
    // Line breaks between tokens become spaces (inside strings there are none: `scan`).
    let mut i = at;
    while i < out.len {
        if let Some(byte) = out.area.get_mut(i) {
            // SAFETY: a byte of the area, which `byte` borrows.
            let current = unsafe { read_volatile(byte) };
            if current == b'\n' || current == b'\r' {
                // SAFETY: as above.
                unsafe { write_volatile(byte, b' ') };
            }
        }
        i = i.wrapping_add(1);
    }
    ok &= out.push(b"}\n");
    if !ok {
        return None;
    }
    out.area.get(..out.len)
}

#[inline(always)]
pub(super) fn all(bytes: &[u8], test: impl Fn(u8) -> bool) -> bool {
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if !test(b) {
            return false;
        }
        i = i.wrapping_add(1);
    }
    true
}

/// Appends to an area, byte by byte with volatile writes (no `memcpy`: see the module).
pub(super) struct Writer<'a> {
    pub(super) area: &'a mut [u8],
    pub(super) len: usize,
}

impl Writer<'_> {
    /// Whether `bytes` fitted (if not, nothing was written).
    #[inline(always)]
    pub(super) fn push(&mut self, bytes: &[u8]) -> bool {
        let Some(room) = self.area.get_mut(self.len..) else { return false };
        if room.len() < bytes.len() {
            return false;
        }
        let mut i = 0;
        while let (Some(&b), Some(slot)) = (bytes.get(i), room.get_mut(i)) {
            // SAFETY: a byte of the area, which `slot` borrows.
            unsafe { write_volatile(slot, b) };
            i = i.wrapping_add(1);
        }
        self.len = self.len.wrapping_add(bytes.len());
        true
    }
}

/// `(status, stdout, stderr)` from `CNI-RS-RELAY <status> <stdout len> <stderr len>\n...`,
/// the lengths exactly those of what follows.
#[inline(always)]
pub(super) fn parse_answer(answer: &[u8]) -> Option<(i32, &[u8], &[u8])> {
    let rest = answer.get(ANSWER_PREFIX.len()..)?;
    if !scan::same(answer.get(..ANSWER_PREFIX.len())?, ANSWER_PREFIX.as_bytes()) {
        return None;
    }
    let (status, rest) = number_after_space(rest)?;
    let (out_len, rest) = number_after_space(rest)?;
    let (err_len, rest) = number_after_space(rest)?;
    let rest = after_byte(rest, b'\n')?;
    if status > 255 || out_len.checked_add(err_len)? != rest.len() as u64 {
        return None;
    }
    let (stdout, stderr) = rest.split_at_checked(out_len as usize)?;
    Some((status as i32, stdout, stderr))
}

/// `" <digits>"` at the start of `bytes`: the number (at most 9 digits) and what follows.
#[inline(always)]
fn number_after_space(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let bytes = after_byte(bytes, b' ')?;
    let mut value: u64 = 0;
    let mut i = 0;
    while let Some(&digit @ b'0'..=b'9') = bytes.get(i) {
        if i == 9 {
            return None;
        }
        value = value.wrapping_mul(10).wrapping_add(u64::from(digit.wrapping_sub(b'0')));
        i = i.wrapping_add(1);
    }
    if i == 0 {
        return None;
    }
    Some((value, bytes.get(i..)?))
}

/// What follows `byte` at the start of `bytes` (`strip_prefix` compares with `memcmp`).
#[inline(always)]
fn after_byte(bytes: &[u8], byte: u8) -> Option<&[u8]> {
    match bytes.split_first() {
        Some((&first, rest)) if first == byte => Some(rest),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_parsed_exactly_and_anything_else_is_refused() {
        let good = answer(1, b"{\"code\":11}\n", b"err\n");
        assert_eq!(parse_answer(&good), Some((1, &b"{\"code\":11}\n"[..], &b"err\n"[..])));
        assert_eq!(parse_answer(&answer(0, b"", b"")), Some((0, &b""[..], &b""[..])));
        for bad in [
            &b"CNI-RS-RELAY 0 5 0\nabc"[..],
            b"CNI-RS-RELAY 0 1 0\nabc",
            b"CNI-RS-RELAY 0 1\na",
            b"CNI-RS-RELAY 256 0 0\n",
            b"CNI-RS-RELAY 0 9999999999 0\n",
            b"CNI-RS-RELAY  0 0 0\n",
            b"CNI-RS-RELAY 0 0 0",
            b"{\"code\":6,\"msg\":\"unknown op\"}\n",
            b"",
        ] {
            assert_eq!(parse_answer(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_writer_refuses_what_does_not_fit_and_writes_nothing_of_it() {
        let mut area = [0u8; 8];
        let mut w = Writer { area: &mut area, len: 0 };
        assert!(w.push(b"abcde"));
        assert!(!w.push(b"fghij"));
        assert!(w.push(b"fgh"));
        assert_eq!(&area, b"abcdefgh");
    }

    #[test]
    fn the_forwarded_variables_are_what_the_sdk_reads() {
        for name in ["CNI_COMMAND", "CNI_ARGS", "CNI_NETNS_OVERRIDE", "TRACEPARENT", "TRACESTATE", "BAGGAGE"]
        {
            assert!(forwarded(name.as_bytes()), "{name}");
        }
        for name in ["PATH", "HOME", "CNI", "TRACEPARENTS", "LD_PRELOAD"] {
            assert!(!forwarded(name.as_bytes()), "{name}");
        }
    }
}
