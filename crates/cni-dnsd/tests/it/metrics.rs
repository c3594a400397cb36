//! The resolver's `/metrics` and `/healthz` scraped over TCP while it answers: cni-dnsd
//! started by hand in a throwaway host namespace with `--metrics-address` on that
//! namespace's loopback (the plugin then uses it), a container's lookups answered from the
//! records, one forwarded to a stub upstream, one from the host itself refused, the
//! counters read back; and a flood of idle
//! clients on the metrics port while the container's lookups go on. Needs root.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Stdio};

use crate::support::{query, Container, Host, Network};
use cni_testkit::scrape::{self, Samples};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

const STUB: &str = "127.0.0.1:5399";

struct Resolver(Child);

impl Drop for Resolver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// cni-dnsd in `host`'s namespace with metrics on; the address it bound there.
fn start_resolver(host: &Host) -> (Resolver, SocketAddr) {
    let log = host.dirs.path().join("mx-dnsd.log");
    let child = host
        .resolver_command()
        .args(["--metrics-address", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let resolver = Resolver(child);
    (resolver, scrape::address_in_log(&log))
}

/// An upstream in the host namespace answering every query with an empty NOERROR reply
/// (the query sent back with the response bit set).
fn start_stub(host: &Host) {
    let udp = host.ns.run(|| UdpSocket::bind(STUB).unwrap()).unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, peer)) = udp.recv_from(&mut buf) {
            if n > 3 {
                buf[2] |= 0x80;
                let _ = udp.send_to(&buf[..n], peer);
            }
        }
    });
}

fn scrape_in(host: &Host, address: SocketAddr) -> Samples {
    host.ns.run(move || Samples::scrape(address)).unwrap()
}

fn queries(samples: &Samples, qtype: &str, result: &str) -> f64 {
    samples.get("cni_dnsd_queries_total", &[("type", qtype), ("result", result)]).unwrap_or(0.0)
}

#[test]
fn lookups_and_forwards_are_counted_by_type_and_result() {
    let host = Host::new();
    let (_resolver, address) = start_resolver(&host);
    start_stub(&host);
    let mut net = Network::new("mxdns", 31);
    net.dnsname["upstreams"] = serde_json::json!([STUB]);
    let mut ctr = Container::new("mxclient");
    net.add(&host, &mut ctr, &[]).unwrap();
    let server = SocketAddr::new(net.gateway(), 53);

    assert_eq!(ctr.lookup(net.gateway(), "mxclient.dns.podman."), Ok(vec![ctr.address("mxdns").to_string()]));
    let missing = ctr.ask_udp(server, &query("nobody.dns.podman.", RecordType::A)).unwrap();
    assert_eq!(missing.response_code(), ResponseCode::NXDomain);
    let aaaa = ctr.ask_udp(server, &query("mxclient.dns.podman.", RecordType::AAAA)).unwrap();
    assert_eq!(aaaa.response_code(), ResponseCode::NoError);
    let forwarded = ctr.ask_udp(server, &query("example.test.", RecordType::A)).unwrap();
    assert_eq!(forwarded.response_code(), ResponseCode::NoError);
    let over_tcp = ctr.ask_tcp(server, &query("mxclient.dns.podman.", RecordType::A)).unwrap();
    assert_eq!(over_tcp.answers().len(), 1);
    // From the host itself: looped back, though the kernel says it came in on the bridge;
    // its source is the gateway's own address. Not answered, counted as refused.
    let resolver_port = SocketAddr::new(net.gateway(), 1053);
    let bytes = query("mxclient.dns.podman.", RecordType::A).to_vec().unwrap();
    host.ns.run(|| UdpSocket::bind("0.0.0.0:0").unwrap().send_to(&bytes, resolver_port).unwrap()).unwrap();
    let refused = || {
        scrape_in(&host, address)
            .get("cni_dnsd_refused_total", &[("transport", "udp"), ("reason", "source")])
            .unwrap_or(0.0)
    };
    cni_testkit::poll::until("the host's query is counted as refused", cni_testkit::poll::EVENTUALLY, || {
        refused() == 1.0
    });

    let samples = scrape_in(&host, address);
    assert_eq!(queries(&samples, "A", "answered"), 2.0, "{samples}");
    assert_eq!(queries(&samples, "A", "nxdomain"), 1.0, "{samples}");
    assert_eq!(queries(&samples, "AAAA", "answered"), 1.0, "{samples}");
    assert_eq!(queries(&samples, "A", "forwarded"), 1.0, "{samples}");
    assert_eq!(samples.value("cni_dnsd_upstream_request_duration_seconds_count", &[]), 1.0);
    assert_eq!(samples.value("cni_dnsd_names", &[]), 1.0);
    assert_eq!(samples.value("cni_dnsd_networks", &[]), 1.0);
    assert!(!samples.to_string().contains("mxclient"), "a name became a label: {samples}");
    let (status, body) = host.ns.run(move || scrape::get(address, "/healthz").unwrap()).unwrap();
    assert_eq!(status, 200, "{body}");
    net.del(&host, &mut ctr);
    assert_eq!(scrape_in(&host, address).value("cni_dnsd_names", &[]), 0.0);
}

#[test]
fn idle_and_oversized_metrics_clients_do_not_stop_lookups() {
    let host = Host::new();
    let (_resolver, address) = start_resolver(&host);
    let net = Network::new("mxdnsh", 32);
    let mut ctr = Container::new("mxvictim");
    net.add(&host, &mut ctr, &[]).unwrap();
    let clients = host
        .ns
        .run(move || {
            let mut clients: Vec<TcpStream> =
                (0..64).filter_map(|_| TcpStream::connect(address).ok()).collect();
            for client in &mut clients {
                let _ = client.write_all(&vec![b'x'; 16 << 10]);
            }
            clients
        })
        .unwrap();
    for _ in 0..5 {
        assert_eq!(
            ctr.lookup(net.gateway(), "mxvictim.dns.podman."),
            Ok(vec![ctr.address("mxdnsh").to_string()])
        );
    }
    drop(clients);
    net.del(&host, &mut ctr);
}
