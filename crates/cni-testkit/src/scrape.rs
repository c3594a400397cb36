//! A daemon's metrics endpoint as a Prometheus server sees it: `GET` over TCP, and a small
//! parser of the exposition text, so tests assert the values a scrape really returns.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// `GET path` at `address`: the status code and the body.
pub fn get(address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    // HTTP/1.0: the server closes the connection after the answer and sends the body as
    // it is (a Go server such as etcd chunks an HTTP/1.1 answer), so reading to the end
    // gives the whole body.
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\nAccept: */*\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// The address a daemon started with `--metrics-address IP:0` bound, from the line every
/// daemon logs ([`cni_cli::metrics_line`]) in the log file at `log`; waits
/// for it up to 30 s, then panics with the log.
pub fn address_in_log(log: &Path) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = text.lines().find_map(cni_cli::metrics_address_in);
        if let Some(address) = found {
            return address;
        }
        assert!(Instant::now() < deadline, "no metrics address logged in {}:\n{text}", log.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The samples of one scrape: `name{label="value",...}` (labels sorted) → value.
#[derive(Debug, Default)]
pub struct Samples(BTreeMap<String, f64>);

/// The key a sample is stored under: the name, then its labels sorted by name.
fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    labels.sort();
    match labels.is_empty() {
        true => name.to_string(),
        false => format!("{name}{{{}}}", labels.join(",")),
    }
}

impl Samples {
    /// Parses exposition text; comments (`# HELP`, `# TYPE`, `# EOF`) are skipped. Label
    /// values are taken as written (the daemons' labels never need escapes).
    pub fn parse(text: &str) -> Samples {
        let mut samples = BTreeMap::new();
        for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad sample line {line:?}"));
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"));
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let inner = rest.strip_suffix('}').unwrap_or_else(|| panic!("bad labels in {line:?}"));
                    let labels: Vec<(&str, &str)> = inner
                        .split(',')
                        .filter(|l| !l.is_empty())
                        .map(|l| {
                            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("bad label in {line:?}"));
                            (k, v.trim_matches('"'))
                        })
                        .collect();
                    (name, labels)
                }
                None => (series, Vec::new()),
            };
            samples.insert(key(name, &labels), value);
        }
        Samples(samples)
    }

    /// Scrapes `/metrics` at `address` and parses it; panics unless it answers 200.
    pub fn scrape(address: SocketAddr) -> Samples {
        let (status, body) = get(address, "/metrics").expect("scraping /metrics");
        assert_eq!(status, 200, "/metrics answered {status}: {body}");
        Samples::parse(&body)
    }

    /// Scrapes `/metrics` at `address` once the endpoint serves again, for up to `limit`:
    /// after a flood of idle clients an endpoint closes new connections at once while its
    /// queue is full (by design), so the first tries after the flood goes may be refused.
    pub fn scrape_once_served(address: SocketAddr, limit: Duration) -> Samples {
        crate::poll::eventually("/metrics served again", limit, || match get(address, "/metrics") {
            Ok((200, body)) => Some(Samples::parse(&body)),
            _ => None,
        })
    }

    /// The value of the sample `name` with exactly `labels`, if present.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.0.get(&key(name, labels)).copied()
    }

    /// The sum of every series of `name` whose labels include all of `matching` (a counter
    /// across the label values a scrape happens to hold, e.g. all of etcd's gRPC methods).
    pub fn sum(&self, name: &str, matching: &[(&str, &str)]) -> f64 {
        let wanted: Vec<String> = matching.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        self.0
            .iter()
            .filter(|(series, _)| {
                let labels = match series.strip_prefix(name) {
                    Some("") => "",
                    Some(rest) if rest.starts_with('{') => &rest[1..rest.len() - 1],
                    _ => return false,
                };
                wanted.iter().all(|w| labels.split(',').any(|label| label == w))
            })
            .map(|(_, value)| value)
            .sum()
    }

    /// Like [`Samples::get`], panicking with the whole scrape when it is missing.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or_else(|| panic!("no sample {} in\n{self}", key(name, labels)))
    }
}

impl std::fmt::Display for Samples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (series, value) in &self.0 {
            writeln!(f, "{series} {value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counters_labels_and_histograms() {
        let text = "# HELP x_total things\n# TYPE x counter\nx_total 3\n\
                    y_total{reason=\"exhausted\",op=\"add\"} 2\n\
                    z_seconds_bucket{le=\"0.5\"} 1\nz_seconds_count 4\n# EOF\n";
        let samples = Samples::parse(text);
        assert_eq!(samples.value("x_total", &[]), 3.0);
        assert_eq!(samples.value("y_total", &[("op", "add"), ("reason", "exhausted")]), 2.0);
        assert_eq!(samples.value("z_seconds_bucket", &[("le", "0.5")]), 1.0);
        assert_eq!(samples.value("z_seconds_count", &[]), 4.0);
        assert!(samples.get("y_total", &[]).is_none());
    }

    #[test]
    fn sums_every_series_matching_the_labels() {
        let text = "m_total{method=\"Range\",type=\"unary\"} 5\nm_total{method=\"Watch\",type=\"bidi\"} 2\n\
                    m_total_other{method=\"Range\"} 100\nm_total_x 7\n";
        let samples = Samples::parse(text);
        assert_eq!(samples.sum("m_total", &[]), 7.0);
        assert_eq!(samples.sum("m_total", &[("type", "unary")]), 5.0);
        assert_eq!(samples.sum("m_total", &[("method", "Watch"), ("type", "bidi")]), 2.0);
        assert_eq!(samples.sum("m_total", &[("method", "Put")]), 0.0);
        assert_eq!(samples.sum("m_total_x", &[]), 7.0);
    }
}
