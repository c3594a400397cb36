//! The token bucket filter qdisc (`tbf`): parameters, the reference plugin's arithmetic,
//! and the `TCA_OPTIONS` wire format (which netlink-packet-route does not model).

use std::time::Duration;

use netlink_packet_core::{DefaultNla, Nla, NlaBuffer, NlasIterator};
use netlink_packet_route::tc::TcOption;

use crate::error::{Error, Result};

/// Scheduler clock ticks per microsecond. The kernel's packet scheduler counts time in
/// units of 64 ns (`PSCHED_SHIFT` = 6, fixed since Linux 2.6.31), which `/proc/net/psched`
/// reports as `t2us` = 1000 and `us2t` = 64: 1000 / 64 ticks per µs.
pub const PSCHED_TICKS_PER_USEC: f64 = 1000.0 / 64.0;

const MICROS_PER_SEC: f64 = 1_000_000.0;

// From <linux/pkt_sched.h>.
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
const TC_LINKLAYER_ETHERNET: u8 = 1;
/// `struct tc_ratespec`: cell_log u8, linklayer u8, overhead u16, cell_align s16, mpu u16,
/// rate u32.
const RATESPEC_LEN: usize = 12;
/// `struct tc_tbf_qopt`: rate, peakrate (two ratespecs), limit, buffer, mtu (u32 each).
const TBF_QOPT_LEN: usize = 2 * RATESPEC_LEN + 12;

/// What a `tbf` qdisc is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TbfParams {
    /// Sustained rate in bytes per second.
    pub rate: u64,
    /// Bucket size as the time it takes to send it at `rate`, in scheduler ticks
    /// (see [`PSCHED_TICKS_PER_USEC`]).
    pub buffer: u32,
    /// Bytes that may wait in the queue for tokens.
    pub limit: u32,
}

impl TbfParams {
    /// The parameters the reference `bandwidth` plugin derives from a rate in bits per
    /// second and a burst in bits: rate and burst in bytes (truncating), the bucket as the
    /// microseconds the burst takes at the rate converted to ticks, and a queue limit of
    /// what the rate sends in `latency` plus the burst. Truncations happen where the
    /// reference truncates, so CHECK agrees with state the reference made.
    pub fn shaping(rate_bits: u64, burst_bits: u64, latency: Duration) -> Result<TbfParams> {
        let rate = rate_bits / 8;
        let burst = burst_bits / 8;
        if rate == 0 {
            return Err(Error::InvalidArgument(format!(
                "tbf rate {rate_bits} bit/s is below one byte per second"
            )));
        }
        if burst == 0 {
            return Err(Error::InvalidArgument(format!("tbf burst {burst_bits} bits is below one byte")));
        }
        let burst = u32::try_from(burst)
            .map_err(|_| Error::InvalidArgument(format!("tbf burst {burst_bits} bits is 4 GiB or more")))?;
        let burst_usec = (f64::from(burst) * MICROS_PER_SEC / rate as f64) as u32;
        let buffer = (f64::from(burst_usec) * PSCHED_TICKS_PER_USEC) as u32;
        let latency_usec = latency.as_secs_f64() * MICROS_PER_SEC;
        let queued = (rate as f64 * latency_usec / MICROS_PER_SEC) as u32;
        Ok(TbfParams { rate, buffer, limit: queued.saturating_add(burst) })
    }

    /// The bucket size in bytes (what `tc` shows as `burst`).
    pub fn burst_bytes(&self) -> u64 {
        let usec = f64::from(self.buffer) / PSCHED_TICKS_PER_USEC;
        (usec * self.rate as f64 / MICROS_PER_SEC).round() as u64
    }

    /// `TCA_OPTIONS` content: `TCA_TBF_PARMS`, plus `TCA_TBF_RATE64` when the rate does not
    /// fit the 32-bit field.
    pub(super) fn to_options(self) -> Vec<TcOption> {
        let mut parms = [0u8; TBF_QOPT_LEN];
        // Ethernet link layer: the kernel then needs no rate table to account per packet.
        parms[1] = TC_LINKLAYER_ETHERNET;
        let rate32 = u32::try_from(self.rate).unwrap_or(u32::MAX);
        parms[8..12].copy_from_slice(&rate32.to_ne_bytes());
        parms[24..28].copy_from_slice(&self.limit.to_ne_bytes());
        parms[28..32].copy_from_slice(&self.buffer.to_ne_bytes());
        let mut options = vec![TcOption::Other(DefaultNla::new(TCA_TBF_PARMS, parms.to_vec()))];
        if self.rate > u64::from(u32::MAX) {
            options.push(TcOption::Other(DefaultNla::new(TCA_TBF_RATE64, self.rate.to_ne_bytes().to_vec())));
        }
        options
    }

    /// Reads the parameters back from the nested attributes of a dumped `tbf` qdisc.
    pub(super) fn from_nested(attributes: &[u8]) -> Option<TbfParams> {
        let mut params: Option<TbfParams> = None;
        let mut rate64: Option<u64> = None;
        for nla in NlasIterator::new(attributes) {
            let nla: NlaBuffer<&[u8]> = nla.ok()?;
            let value = nla.value();
            match nla.kind() {
                TCA_TBF_PARMS if value.len() >= TBF_QOPT_LEN => {
                    let word = |at: usize| u32::from_ne_bytes(value[at..at + 4].try_into().expect("4 bytes"));
                    params = Some(TbfParams { rate: u64::from(word(8)), limit: word(24), buffer: word(28) });
                }
                TCA_TBF_RATE64 if value.len() >= 8 => {
                    rate64 = Some(u64::from_ne_bytes(value[..8].try_into().expect("8 bytes")));
                }
                _ => {}
            }
        }
        params.map(|p| TbfParams { rate: rate64.unwrap_or(p.rate), ..p })
    }
}

/// The raw value of an attribute the packet crate left undecoded.
pub(super) fn raw_value(nla: &DefaultNla) -> Vec<u8> {
    let mut value = vec![0u8; nla.value_len()];
    nla.emit_value(&mut value);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    const LATENCY: Duration = Duration::from_millis(25);

    #[test]
    fn reference_arithmetic() {
        // 10 Mbit/s with a 1 Mbit burst: 1_250_000 B/s, 125_000 B = 100 ms = 1_562_500 ticks;
        // limit = 25 ms of rate (31_250 B) + burst.
        let p = TbfParams::shaping(10_000_000, 1_000_000, LATENCY).unwrap();
        assert_eq!(p, TbfParams { rate: 1_250_000, buffer: 1_562_500, limit: 156_250 });
        assert_eq!(p.burst_bytes(), 125_000);
        // Truncations: 123 bit/s -> 15 B/s; 456 bits -> 57 B; 57/15 s = 3_800_000 µs.
        let p = TbfParams::shaping(123, 456, LATENCY).unwrap();
        assert_eq!(p.rate, 15);
        assert_eq!(p.buffer, 59_375_000);
        assert_eq!(p.limit, 57);
    }

    #[test]
    fn degenerate_values_are_refused() {
        assert!(TbfParams::shaping(7, 8000, LATENCY).is_err());
        assert!(TbfParams::shaping(8000, 7, LATENCY).is_err());
        assert!(TbfParams::shaping(8000, 8 * (1 << 32), LATENCY).is_err());
    }

    fn nested(options: &[TcOption]) -> Vec<u8> {
        use netlink_packet_core::Emitable;
        let mut bytes = vec![0u8; options.buffer_len()];
        options.emit(&mut bytes);
        bytes
    }

    #[test]
    fn options_round_trip() {
        let p = TbfParams { rate: 1_250_000, buffer: 1_562_500, limit: 156_250 };
        let options = p.to_options();
        assert_eq!(options.len(), 1);
        let bytes = nested(&options);
        // One attribute: 4-byte header + 36-byte tc_tbf_qopt.
        assert_eq!(bytes.len(), 40);
        assert_eq!(u16::from_ne_bytes([bytes[2], bytes[3]]), TCA_TBF_PARMS);
        assert_eq!(bytes[4 + 1], TC_LINKLAYER_ETHERNET);
        assert_eq!(&bytes[4 + 8..4 + 12], &1_250_000u32.to_ne_bytes());
        assert_eq!(TbfParams::from_nested(&bytes), Some(p));
    }

    #[test]
    fn fast_rates_use_the_64_bit_attribute() {
        let p = TbfParams { rate: 40_000_000_000 / 8 * 4, buffer: 10, limit: 1000 };
        let options = p.to_options();
        assert_eq!(options.len(), 2);
        let bytes = nested(&options);
        assert_eq!(&bytes[4 + 8..4 + 12], &u32::MAX.to_ne_bytes());
        assert_eq!(TbfParams::from_nested(&bytes), Some(p));
    }

    #[test]
    fn ticks_match_the_running_kernel() {
        // /proc/net/psched: t2us us2t clock_res hz (hex).
        let text = std::fs::read_to_string("/proc/net/psched").unwrap();
        let fields: Vec<u64> = text.split_whitespace().map(|f| u64::from_str_radix(f, 16).unwrap()).collect();
        assert_eq!(fields[0] as f64 / fields[1] as f64, PSCHED_TICKS_PER_USEC);
    }
}
