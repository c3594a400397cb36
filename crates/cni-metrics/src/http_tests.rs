use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cni_testkit::scrape::{self, Samples};

use super::*;

/// A source whose health is switched by the test and whose metric counts scrapes.
#[derive(Default)]
struct Fake {
    unhealthy: AtomicBool,
    scrapes: AtomicU64,
}

impl Source for Fake {
    fn metrics(&self) -> String {
        let n = self.scrapes.fetch_add(1, Ordering::SeqCst) + 1;
        format!("# TYPE fake_scrapes counter\nfake_scrapes_total {n}\n# EOF\n")
    }

    fn health(&self) -> Result<String, String> {
        match self.unhealthy.load(Ordering::SeqCst) {
            true => Err("etcd unreachable".into()),
            false => Ok("etcd answered".into()),
        }
    }
}

fn start(limits: Limits) -> (SocketAddr, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    let address = serve_with("127.0.0.1:0".parse().unwrap(), fake.clone(), limits).unwrap();
    (address, fake)
}

fn short() -> Limits {
    Limits { deadline: Duration::from_millis(300), connections: 16 }
}

/// Sends `request` as is and returns the whole answer.
fn raw(address: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // The server may answer and close before taking all of an oversized request.
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn metrics_and_health_are_served_and_health_turns_503() {
    let (address, fake) = start(Limits::default());
    assert_eq!(Samples::scrape(address).value("fake_scrapes_total", &[]), 1.0);
    let (status, body) = scrape::get(address, "/healthz").unwrap();
    assert_eq!((status, body.as_str()), (200, "ok: etcd answered\n"));
    fake.unhealthy.store(true, Ordering::SeqCst);
    let (status, body) = scrape::get(address, "/healthz?verbose").unwrap();
    assert_eq!((status, body.as_str()), (503, "unhealthy: etcd unreachable\n"));
    let answer = raw(address, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(answer.contains(&format!("Content-Type: {METRICS_CONTENT_TYPE}")), "{answer}");
}

#[test]
fn other_paths_methods_and_garbage_are_refused() {
    let (address, fake) = start(Limits::default());
    assert_eq!(scrape::get(address, "/").unwrap().0, 404);
    assert_eq!(scrape::get(address, "/metrics/../etc/passwd").unwrap().0, 404);
    assert!(
        raw(address, b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc").starts_with("HTTP/1.1 405")
    );
    assert!(raw(address, b"DELETE /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    assert!(raw(address, b"\x16\x03\x01 not http\r\n\r\n").starts_with("HTTP/1.1 400"));
    assert!(raw(address, b"GET /metrics\r\n\r\n").starts_with("HTTP/1.1 400"), "HTTP/0.9 is not served");
    let head = raw(address, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"), "HEAD has no body: {head}");
    assert_eq!(fake.scrapes.load(Ordering::SeqCst), 1, "only HEAD rendered the metrics");
}

#[test]
fn an_oversized_head_is_refused_unread_and_serving_goes_on() {
    let (address, _) = start(Limits::default());
    // 32 KiB of headers: the answer comes once 8 KiB are in.
    let mut request = b"GET /metrics HTTP/1.1\r\n".to_vec();
    while request.len() < 32 << 10 {
        request
            .extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let answer = raw(address, &request);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    // Just under the limit is still a request.
    let mut fits = b"GET /healthz HTTP/1.1\r\nX-Filler: ".to_vec();
    fits.resize(MAX_REQUEST_HEAD - 8, b'a');
    fits.extend_from_slice(b"\r\n\r\n");
    assert!(raw(address, &fits).starts_with("HTTP/1.1 200"));
}

#[test]
fn slow_loris_and_floods_are_cut_and_scrapes_come_back() {
    let limits = short();
    let (address, _) = start(limits);
    // More trickling clients than the endpoint holds, each sending a byte now and then.
    let mut loris: Vec<TcpStream> = (0..32).map(|_| TcpStream::connect(address).unwrap()).collect();
    for stream in &mut loris {
        let _ = stream.write_all(b"GET /metr");
    }
    for _ in 0..4 {
        std::thread::sleep(limits.deadline / 2);
        for stream in &mut loris {
            let _ = stream.write_all(b"i");
        }
    }
    // Every one of them was closed (at the deadline, or when newer ones took its place):
    // reading returns end-of-file or a reset, never a 200.
    for stream in &mut loris {
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        assert!(!String::from_utf8_lossy(&answer).contains("200 OK"));
    }
    // The endpoint serves again: the connections were freed, not lost.
    assert_eq!(Samples::scrape(address).value("fake_scrapes_total", &[]), 1.0);
}

/// The threads of this process (each test runs in its own process under nextest).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn health_and_metrics_answer_while_idle_and_slow_clients_hold_connections() {
    // The production bounds: the daemons' liveness probes meet these.
    let before = threads();
    let (address, fake) = start(Limits::default());
    assert_eq!(threads(), before + 1, "the endpoint is one thread");
    // More idle clients than the endpoint holds, connected and silent, and a slow loris
    // trickling a head that never ends: they stay open while the probe asks.
    let mut idle: Vec<TcpStream> =
        (0..MAX_CONNECTIONS + 72).map(|_| TcpStream::connect(address).unwrap()).collect();
    let mut loris = TcpStream::connect(address).unwrap();
    loris.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ").unwrap();
    for round in 0..3 {
        let _ = loris.write_all(b"a");
        let (status, body) = scrape::get(address, "/healthz").expect("the probe is answered");
        assert_eq!((status, body.as_str()), (200, "ok: etcd answered\n"), "round {round}");
        let scraped = Samples::scrape(address).value("fake_scrapes_total", &[]);
        assert_eq!(scraped, f64::from(round + 1));
        // More silent clients keep arriving; the endpoint sheds its oldest, not the probe.
        idle.extend((0..50).map(|_| TcpStream::connect(address).unwrap()));
    }
    assert_eq!(threads(), before + 1, "no thread per client");
    assert_eq!(fake.scrapes.load(Ordering::SeqCst), 3);
    // The loris never finished its head: it is closed without an answer.
    loris.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut answer = Vec::new();
    let _ = loris.read_to_end(&mut answer);
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
}
