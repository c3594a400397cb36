//! Ethernet MAC addresses in the `aa:bb:cc:dd:ee:ff` form CNI results and configs use.

use std::fmt;
use std::str::FromStr;

/// A 48-bit Ethernet hardware address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// Builds one from a netlink `IFLA_ADDRESS` payload; `None` unless it is 6 bytes long.
    pub fn from_slice(bytes: &[u8]) -> Option<MacAddr> {
        <[u8; 6]>::try_from(bytes).ok().map(MacAddr)
    }

    /// The six bytes.
    pub fn octets(&self) -> [u8; 6] {
        self.0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// The text was not six `:`- or `-`-separated hex octets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address {0:?}")]
pub struct InvalidMac(pub String);

impl FromStr for MacAddr {
    type Err = InvalidMac;

    fn from_str(text: &str) -> Result<MacAddr, InvalidMac> {
        let invalid = || InvalidMac(text.to_string());
        let mut octets = [0u8; 6];
        let mut parts = text.split([':', '-']);
        for octet in &mut octets {
            let part = parts.next().ok_or_else(invalid)?;
            if part.len() != 2 {
                return Err(invalid());
            }
            *octet = u8::from_str_radix(part, 16).map_err(|_| invalid())?;
        }
        if parts.next().is_some() {
            return Err(invalid());
        }
        Ok(MacAddr(octets))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let mac: MacAddr = "C2:11:22:33:44:5f".parse().unwrap();
        assert_eq!(mac.to_string(), "c2:11:22:33:44:5f");
        assert_eq!("c2-11-22-33-44-5f".parse::<MacAddr>().unwrap(), mac);
        for bad in ["", "c2:11:22:33:44", "c2:11:22:33:44:55:66", "c2:11:22:33:44:5", "zz:11:22:33:44:55"] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
        assert_eq!(MacAddr::from_slice(&[1, 2, 3]), None);
    }
}
