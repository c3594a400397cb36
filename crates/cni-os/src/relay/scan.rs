//! Finds a node agent's socket in a plugin's configuration, before libc has started: a
//! JSON scanner that allocates nothing, calls nothing and cannot panic (see the module
//! docs of `relay`).
//!
//! It is not a validating parser, and need not be: the agent parses the configuration
//! fully, and whatever it refuses goes to the full plugin. What the scanner must get
//! right is where the keys are, which needs JSON's lexical structure only (strings and
//! their escapes, nesting, commas and colons), and that the configuration can travel on
//! one line: a raw line break inside a string (invalid JSON) must not be turned into a
//! space (valid), so such a configuration is not relayed.

use core::ptr::read_volatile;

/// What the scanner found under `ipam`: the socket (a range of the input) and the
/// per-call timeout, when set.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct AgentKeys {
    pub socket: Option<(usize, usize)>,
    pub timeout_ms: Option<u64>,
}

/// The configuration's `ipam.agentSocket` and `ipam.timeoutMs`, or `None` when the
/// configuration is not one the relay can carry or the keys are not plainly there: a key
/// written with escapes (it may decode to one of these), a key given twice, a socket path
/// with escapes, a timeout that is not plain digits, a raw control character in a string,
/// anything after the top-level object. In each case the full plugin decides.
#[inline(always)]
pub(crate) fn agent_keys(json: &[u8]) -> Option<AgentKeys> {
    let mut scan = Scanner { s: json, i: 0 };
    let mut found = AgentKeys::default();
    let mut seen_ipam = false;
    scan.ws();
    scan.expect(b'{')?;
    scan.ws();
    if scan.peek() == Some(b'}') {
        scan.i = scan.i.wrapping_add(1);
    } else {
        loop {
            let key = scan.plain_key()?;
            if same(key, b"ipam") {
                if seen_ipam {
                    return None;
                }
                seen_ipam = true;
                if scan.peek() == Some(b'{') {
                    scan.ipam(&mut found)?;
                } else {
                    scan.skip_value()?;
                }
            } else {
                scan.skip_value()?;
            }
            if !scan.next_member()? {
                break;
            }
        }
    }
    scan.ws();
    if scan.i != json.len() {
        return None;
    }
    Some(found)
}

struct Scanner<'a> {
    s: &'a [u8],
    /// Never past `s.len()`: every step checks the byte it steps over exists.
    i: usize,
}

impl<'a> Scanner<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    #[inline(always)]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i = self.i.wrapping_add(1);
        }
    }

    #[inline(always)]
    fn expect(&mut self, byte: u8) -> Option<()> {
        if self.peek()? != byte {
            return None;
        }
        self.i = self.i.wrapping_add(1);
        Some(())
    }

    /// A string at the current position: its contents' range and whether it has escapes.
    #[inline(always)]
    fn string(&mut self) -> Option<(usize, usize, bool)> {
        self.expect(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            match self.peek()? {
                b'"' => {
                    let end = self.i;
                    self.i = self.i.wrapping_add(1);
                    return Some((start, end, escaped));
                }
                b'\\' => {
                    escaped = true;
                    // The escaped byte must exist; what it is, the agent's parser judges.
                    self.s.get(self.i.wrapping_add(1))?;
                    self.i = self.i.wrapping_add(2);
                }
                0..=0x1f => return None,
                _ => self.i = self.i.wrapping_add(1),
            }
        }
    }

    /// An object member's key without escapes, and the colon after it.
    #[inline(always)]
    fn plain_key(&mut self) -> Option<&'a [u8]> {
        let (start, end, escaped) = self.string()?;
        if escaped {
            return None;
        }
        self.ws();
        self.expect(b':')?;
        self.ws();
        self.s.get(start..end)
    }

    /// After a member's value: whether another member follows (a comma) or the object
    /// ends (its brace, consumed).
    #[inline(always)]
    fn next_member(&mut self) -> Option<bool> {
        self.ws();
        match self.peek()? {
            b',' => {
                self.i = self.i.wrapping_add(1);
                self.ws();
                Some(true)
            }
            b'}' => {
                self.i = self.i.wrapping_add(1);
                Some(false)
            }
            _ => None,
        }
    }

    /// The `ipam` object: its two keys noted, everything else stepped over.
    #[inline(always)]
    fn ipam(&mut self, found: &mut AgentKeys) -> Option<()> {
        self.expect(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i = self.i.wrapping_add(1);
            return Some(());
        }
        loop {
            let key = self.plain_key()?;
            if same(key, b"agentSocket") {
                let (start, end, escaped) = self.string()?;
                if escaped || found.socket.is_some() {
                    return None;
                }
                found.socket = Some((start, end));
            } else if same(key, b"timeoutMs") {
                if found.timeout_ms.is_some() {
                    return None;
                }
                found.timeout_ms = Some(self.digits()?);
            } else {
                self.skip_value()?;
            }
            if !self.next_member()? {
                return Some(());
            }
        }
    }

    /// A non-negative integer of at most 18 digits.
    #[inline(always)]
    fn digits(&mut self) -> Option<u64> {
        let mut value: u64 = 0;
        let mut count = 0u32;
        while let Some(byte @ b'0'..=b'9') = self.peek() {
            count = count.wrapping_add(1);
            if count > 18 {
                return None;
            }
            value = value.wrapping_mul(10).wrapping_add(u64::from(byte.wrapping_sub(b'0')));
            self.i = self.i.wrapping_add(1);
        }
        (count > 0).then_some(value)
    }

    /// Steps over one value, stopping before the comma or closing bracket that ends it.
    #[inline(always)]
    fn skip_value(&mut self) -> Option<()> {
        let start = self.i;
        let mut depth: u32 = 0;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    depth = depth.checked_add(1)?;
                    self.i = self.i.wrapping_add(1);
                }
                b'}' | b']' if depth == 0 => break,
                b'}' | b']' => {
                    depth = depth.wrapping_sub(1);
                    self.i = self.i.wrapping_add(1);
                }
                b',' if depth == 0 => break,
                _ => self.i = self.i.wrapping_add(1),
            }
        }
        (self.i != start).then_some(())
    }
}

/// Byte-wise equality with volatile reads: `==` on slices calls `memcmp`, which before
/// libc has started is not yet resolved (see `relay`).
#[inline(always)]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        // SAFETY: `i` is below the length of both slices.
        let (x, y) = unsafe { (read_volatile(a.as_ptr().add(i)), read_volatile(b.as_ptr().add(i))) };
        if x != y {
            return false;
        }
        i = i.wrapping_add(1);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket_of(json: &str) -> Option<Option<String>> {
        agent_keys(json.as_bytes()).map(|k| k.socket.map(|(s, e)| json[s..e].to_string()))
    }

    #[test]
    fn finds_the_socket_and_timeout_under_ipam_only() {
        let conf = r#"{"cniVersion":"1.0.0","name":"n","agentSocket":"/top",
            "prevResult":{"ipam":{"agentSocket":"/nested"}},
            "ipam":{"type":"etcd-ipam","routes":[{"dst":"0.0.0.0/0"}],"agentSocket":"/run/a.sock",
                    "timeoutMs": 1500, "pools":["10.0.0.0/16"]},
            "args":{"x":[1,2,{"ipam":{"agentSocket":"/deep"}}]}}"#;
        let keys = agent_keys(conf.as_bytes()).unwrap();
        let (s, e) = keys.socket.unwrap();
        assert_eq!(&conf[s..e], "/run/a.sock");
        assert_eq!(keys.timeout_ms, Some(1500));
        assert_eq!(socket_of(r#"{"name":"n","ipam":{"type":"etcd-ipam"}}"#), Some(None));
        assert_eq!(socket_of(r#"{}"#), Some(None));
        assert_eq!(socket_of(" {\"ipam\":{}} \n"), Some(None));
    }

    /// Every configuration the relay cannot carry as it is, or whose keys only a full
    /// parser can place, goes to the full plugin.
    #[test]
    fn what_only_the_full_plugin_can_judge_is_not_relayed() {
        for refused in [
            r#"{"ipam":{"agentSocket":"/a","agentSocket":"/b"}}"#,
            r#"{"ipam":{"agentSocket":"/a"},"ipam":{}}"#,
            r#"{"ipam":{"agent\u0053ocket":"/a"}}"#,
            r#"{"\u0069pam":{"agentSocket":"/a"}}"#,
            r#"{"ipam":{"agentSocket":"\/a"}}"#,
            r#"{"ipam":{"agentSocket":7}}"#,
            r#"{"ipam":{"timeoutMs":"7"}}"#,
            r#"{"ipam":{"timeoutMs":-7}}"#,
            r#"{"ipam":{"timeoutMs":1,"timeoutMs":2}}"#,
            r#"{"ipam":{"timeoutMs":1234567890123456789}}"#,
            "{\"name\":\"a\nb\",\"ipam\":{\"agentSocket\":\"/a\"}}",
            "{\"ipam\":{\"agentSocket\":\"/a\tb\"}}",
            r#"{"ipam":{"agentSocket":"/a"}} trailing"#,
            r#"{"ipam":{"agentSocket":"/a"}"#,
            r#"{"ipam":{"agentSocket":"/a}"#,
            r#"["ipam"]"#,
            "",
            r#"{"a":}"#,
            r#"{"a" 1}"#,
        ] {
            assert_eq!(agent_keys(refused.as_bytes()), None, "{refused:?}");
        }
    }

    #[test]
    fn never_reads_past_the_end_of_any_prefix() {
        let conf = br#"{"name":"n","ipam":{"agentSocket":"/s","timeoutMs":9,"x":[{"y":"z\"\\"}]}}"#;
        for end in 0..conf.len() {
            assert_eq!(agent_keys(&conf[..end]), None, "{}", String::from_utf8_lossy(&conf[..end]));
        }
        assert!(agent_keys(conf).is_some());
    }

    #[test]
    fn same_compares_bytes() {
        assert!(same(b"ipam", b"ipam"));
        assert!(!same(b"ipam", b"ipan"));
        assert!(!same(b"ipam", b"ipams"));
        assert!(same(b"", b""));
    }
}
