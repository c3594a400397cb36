//! Small parsers for what containers print, and HTTP fetches from the engines' host.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use cni_testkit::ns::TestNetns;

/// An IPv4 address with its prefix length, e.g. `10.88.0.5/16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Cidr {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Cidr {
    /// Parses `a.b.c.d/n`.
    pub fn parse(text: &str) -> Option<Ipv4Cidr> {
        let (addr, prefix) = text.trim().split_once('/')?;
        let prefix: u8 = prefix.parse().ok()?;
        (prefix <= 32).then_some(Ipv4Cidr { addr: addr.parse().ok()?, prefix })
    }

    /// `a.b.c.d/n` again.
    pub fn to_string_cidr(&self) -> String {
        format!("{}/{}", self.addr, self.prefix)
    }

    /// Whether `addr` lies in this subnet.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
        u32::from(addr) & mask == u32::from(self.addr) & mask
    }
}

/// The IPv4 addresses (with prefix) in `ip -o -4 addr` output, in order.
pub fn ipv4_addresses(ip_addr_output: &str) -> Vec<Ipv4Cidr> {
    ip_addr_output
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "inet")?;
            Ipv4Cidr::parse(words.next()?)
        })
        .collect()
}

/// The single IPv4 address in `ip -o -4 addr show <if>` output; panics otherwise.
pub fn single_ipv4(ip_addr_output: &str) -> Ipv4Cidr {
    let found = ipv4_addresses(ip_addr_output);
    assert_eq!(found.len(), 1, "expected exactly one IPv4 address in:\n{ip_addr_output}");
    found[0]
}

/// Fetches `http://addr/` from inside `netns` (HTTP/1.0), retrying for up to `patience`
/// while the server starts; returns the body or the last error.
pub fn http_get(netns: &TestNetns, addr: SocketAddr, patience: Duration) -> Result<String, String> {
    let deadline = Instant::now() + patience;
    loop {
        let attempt = netns.run(|| fetch_once(addr)).map_err(|e| format!("enter namespace: {e}"))?;
        match attempt {
            Ok(body) => return Ok(body),
            Err(err) if Instant::now() >= deadline => return Err(format!("GET http://{addr}/: {err}")),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn fetch_once(addr: SocketAddr) -> std::io::Result<String> {
    let timeout = Duration::from_secs(3);
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(format!("GET / HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response).into_owned();
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => Ok(body.to_string()),
        _ => Err(std::io::Error::other(format!("unexpected response: {response:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_address_in_ip_o_output() {
        let out =
            "2: eth0    inet 10.88.0.5/16 brd 10.88.255.255 scope global eth0\\       valid_lft forever\n";
        let cidr = single_ipv4(out);
        assert_eq!(cidr, Ipv4Cidr { addr: Ipv4Addr::new(10, 88, 0, 5), prefix: 16 });
    }

    #[test]
    fn subnet_membership() {
        let subnet = Ipv4Cidr::parse("10.88.0.0/16").unwrap();
        assert!(subnet.contains(Ipv4Addr::new(10, 88, 3, 4)));
        assert!(!subnet.contains(Ipv4Addr::new(10, 89, 0, 1)));
        assert!(Ipv4Cidr::parse("0.0.0.0/0").unwrap().contains(Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(Ipv4Cidr::parse("10.0.0.0/33"), None);
    }
}
