//! etcd-ipam against a hostile etcd member (a fake one on 127.0.0.1 answering every request
//! with sizes meant to exhaust memory): the plugin must answer with CNI error JSON, code 11
//! and exit status 1, never abort on an allocation. A module of the etcd_ipam tests, whose
//! helpers it uses.

use cni_testkit::etcd::HostileServer;

use super::{conf, run};

const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";

fn assert_refused(server: &HostileServer, what: &str) {
    let conf = conf(&[server.endpoint()], "ethost", "node-a", &["10.93.0.0/16"], 26);
    for command in ["ADD", "DEL"] {
        let out = run(&conf, command, "c1");
        assert_eq!(out.status, 1, "{command} against {what}: status {} (-1: killed by a signal)", out.status);
        let err = out.error();
        assert_eq!(err.code, 11, "{command} against {what}: {err:?}");
        assert!(err.msg.contains("limit"), "{command} against {what}: {err:?}");
    }
}

#[test]
fn oversized_answers_are_code_11_not_an_abort() {
    let huge_length = HostileServer::start(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n{}");
    assert_refused(&huge_length, "Content-Length 1e12");
    // A chunk size no one allocates, then as much of it as the client keeps reading.
    let huge_chunk =
        HostileServer::start_endless(&[CHUNKED, b"ffffffffffff\r\n"].concat(), &vec![b'x'; 1 << 20]);
    assert_refused(&huge_chunk, "chunk size ffffffffffff");
    let endless_line = HostileServer::start_endless(b"HTTP/1.1 200 OK\r\nX-Junk: ", &[b'a'; 4096]);
    assert_refused(&endless_line, "an endless header line");
}
