//! gRPC to one etcd member: tonic's generic client ([`Grpc`]) on an HTTP/2 connection this
//! module dials itself (TCP, then rustls for `https://` endpoints), and the sorting of what
//! can go wrong into what the caller does next.
//!
//! A member's answer is not trusted with memory or time: the message a call decodes is at
//! most [`MAX_BODY`] (tonic reads the 5-byte gRPC length prefix and refuses a larger one
//! before allocating it), the response's header list at most [`MAX_HEAD`] (hyper's HTTP/2
//! limit), and the caller runs each attempt under one deadline covering the connection,
//! the TLS handshake, the request and the whole answer: a member trickling bytes, or one
//! never answering, cannot hold a call past it.

use std::error::Error as StdError;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{AlertDescription, ClientConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_stream::StreamExt;
use tonic::client::Grpc;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

use crate::write_batch::BatchedWrites;

/// The largest message one answer (or one watch event batch) may be. etcd refuses
/// requests over 1.5 MiB by default, so one record is far smaller; the largest answers are
/// prefix listings (etcd-ipam's GC lists every handle), about 200 bytes per key, so this
/// holds tens of thousands of keys.
pub const MAX_BODY: usize = 8 * 1024 * 1024;

/// The largest header list (HTTP/2 headers or trailers, decoded) of an answer; etcd's are
/// about 100 bytes.
pub const MAX_HEAD: u32 = 16 * 1024;

/// The byte stream under one HTTP/2 connection: TCP, or TLS over TCP.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// How a long-lived connection checks that its member is still there: an HTTP/2 ping
/// every `interval`, and the connection broken when one goes unacknowledged for
/// `timeout`. A watch needs it: a member that vanishes without closing the connection (a
/// crashed machine, a cut link) otherwise leaves the watch waiting for events forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    pub interval: Duration,
    pub timeout: Duration,
}

/// A watch's pings: etcd sends GOAWAY to a client pinging more often than every 5 s
/// (its `--grpc-keepalive-min-time`); the timeout leaves room for a caller that drives
/// the watch only between pieces of its own work. A vanished member is noticed within
/// about 30 s.
pub const WATCH_LIVENESS: Liveness =
    Liveness { interval: Duration::from_secs(15), timeout: Duration::from_secs(15) };

/// How to reach the members: whether with TLS, and its configuration.
#[derive(Clone)]
pub struct Dialer {
    tls: Option<Arc<ClientConfig>>,
}

/// Why an attempt on a member failed, sorted by what the caller does next.
#[derive(Debug)]
pub enum Failure {
    /// No answer within the attempt's deadline: the member is up but slow (an election,
    /// a write held for a dead leader) and may answer a later, more patient attempt.
    TimedOut,
    /// The member could not be reached, or answered with something that is not an answer
    /// (not HTTP/2, a message over the limit, a connection closed mid-answer): it failed.
    Broken(String),
    /// etcd answered with an error of its own.
    Status(Status),
}

impl Dialer {
    pub fn new(tls: Option<Arc<ClientConfig>>) -> Dialer {
        Dialer { tls }
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Opens an HTTP/2 connection to `host` (`host:port`).
    pub async fn connect(&self, host: &str) -> Result<Grpc<Channel>, Failure> {
        self.connect_with(host, None).await
    }

    /// [`Dialer::connect`], with HTTP/2 pings that break the connection when the member
    /// stops acknowledging them (`liveness`).
    pub async fn connect_with(
        &self,
        host: &str,
        liveness: Option<Liveness>,
    ) -> Result<Grpc<Channel>, Failure> {
        // The scheme is only the URI's: the connector below makes the connection, TLS or not.
        let mut endpoint = Endpoint::from_shared(format!("http://{host}"))
            .map_err(|e| Failure::Broken(format!("endpoint {host}: {e}")))?
            .http2_max_header_list_size(MAX_HEAD);
        if let Some(liveness) = liveness {
            endpoint = endpoint
                .http2_keep_alive_interval(liveness.interval)
                .keep_alive_timeout(liveness.timeout)
                .keep_alive_while_idle(true);
        }
        let (host, tls) = (host.to_string(), self.tls.clone());
        let connector = tower::service_fn(move |_: Uri| dial(host.clone(), tls.clone()));
        let channel = endpoint
            .connect_with_connector(connector)
            .await
            .map_err(|e| Failure::Broken(describe(e.to_string(), e.source(), self.is_tls())))?;
        Ok(Grpc::new(channel).max_decoding_message_size(MAX_BODY))
    }

    /// The failure of a call whose answer was `status`.
    pub fn failure(&self, status: Status) -> Failure {
        if status.source().is_some() {
            // The connection or HTTP/2 failed under the call: no answer of etcd's.
            return Failure::Broken(describe(status.message().to_string(), status.source(), self.is_tls()));
        }
        match status.code() {
            // tonic's own refusal of an answer it could not take: a message over the
            // limit, or bytes that are not the protobuf promised.
            Code::OutOfRange if status.message().starts_with("Error, decoded message length too large") => {
                Failure::Broken(format!(
                    "an answer over the {} MiB limit: {}",
                    MAX_BODY >> 20,
                    status.message()
                ))
            }
            Code::Internal => Failure::Broken(format!("not a well-formed gRPC answer: {}", status.message())),
            _ => Failure::Status(status),
        }
    }
}

/// TCP (with Nagle off: a request is one write, and HTTP/2 frames must not wait for the
/// acknowledgement of the previous segment), then TLS for an `https://` member, under
/// [`BatchedWrites`] so that a request's frames go out together.
async fn dial(host: String, tls: Option<Arc<ClientConfig>>) -> io::Result<TokioIo<Box<dyn Io>>> {
    let tcp = TcpStream::connect(&host).await?;
    tcp.set_nodelay(true)?;
    let Some(config) = tls else { return Ok(TokioIo::new(Box::new(BatchedWrites::new(tcp)))) };
    let name = host.rsplit_once(':').map_or(host.as_str(), |(name, _)| name);
    let name = ServerName::try_from(name.trim_start_matches('[').trim_end_matches(']').to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("TLS: server name {name}: {e}")))?;
    let stream = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
    Ok(TokioIo::new(Box::new(BatchedWrites::new(stream))))
}

/// A unary call of `path`; `streaming` for a method whose request and answer are streams
/// (LeaseKeepAlive), of which the first answer is taken. The request stream stays open
/// until then: etcd ends the call when the client's side ends.
pub async fn call<Req, Resp>(
    mut grpc: Grpc<Channel>,
    path: &'static str,
    request: Req,
    streaming: bool,
) -> Result<Resp, Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    grpc.ready().await.map_err(|e| Status::from_error(e.into()))?;
    let path = PathAndQuery::from_static(path);
    let codec = ProstCodec::<Req, Resp>::default();
    if !streaming {
        return Ok(grpc.unary(tonic::Request::new(request), path, codec).await?.into_inner());
    }
    let requests = tokio_stream::once(request).chain(tokio_stream::pending());
    let mut answers = grpc.streaming(tonic::Request::new(requests), path, codec).await?.into_inner();
    answers.message().await?.ok_or_else(|| Status::unavailable("the stream ended without an answer"))
}

/// Opens a stream of `path` (Watch) whose requests are `request` alone.
pub async fn open_stream<Req, Resp>(
    mut grpc: Grpc<Channel>,
    path: &'static str,
    request: Req,
) -> Result<tonic::Streaming<Resp>, Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    grpc.ready().await.map_err(|e| Status::from_error(e.into()))?;
    let requests = tokio_stream::once(request).chain(tokio_stream::pending());
    let codec = ProstCodec::<Req, Resp>::default();
    Ok(grpc
        .streaming(tonic::Request::new(requests), PathAndQuery::from_static(path), codec)
        .await?
        .into_inner())
}

/// An error (`first`, then its causes), one sentence: "transport error: tcp connect:
/// Connection refused (os error 111)". TLS failures say so, and whose certificate is at
/// fault.
fn describe(first: String, mut cause: Option<&(dyn StdError + 'static)>, tls: bool) -> String {
    let mut parts = vec![first];
    let mut hung_up = false;
    while let Some(inner) = cause {
        if let Some(rustls) = find_rustls(inner) {
            return tls_message(rustls);
        }
        if let Some(io) = inner.downcast_ref::<io::Error>() {
            hung_up |= matches!(
                io.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
            );
        }
        let text = inner.to_string();
        hung_up |= text.contains("connection closed") || text.contains("broken pipe");
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        cause = inner.source();
    }
    let text = parts.join(": ");
    // The member's alert after the handshake reaches us through HTTP/2, as text.
    if tls && text.contains("fatal alert") {
        let refused_certificate =
            ["BadCertificate", "CertificateRequired", "UnknownCA", "CertificateUnknown"]
                .iter()
                .any(|alert| text.contains(alert));
        let hint = if refused_certificate { CERTIFICATE_REFUSED } else { "" };
        return format!("TLS: {text}{hint}");
    }
    if tls && hung_up {
        // With TLS 1.3 a member refuses a client certificate (or its absence) after the
        // client has finished its side of the handshake: the refusal can reach us as the
        // connection closing under the first request instead of as the member's alert.
        return format!(
            "TLS: {text} (the member hung up: does it require a client certificate? certFile/keyFile)"
        );
    }
    text
}

const CERTIFICATE_REFUSED: &str = " (the member refused this client's certificate: certFile/keyFile)";

fn find_rustls<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    err.downcast_ref::<rustls::Error>().or_else(|| {
        let io = err.downcast_ref::<io::Error>()?;
        io.get_ref()?.downcast_ref::<rustls::Error>()
    })
}

/// "TLS: received fatal alert: BadCertificate (the member refused this client's
/// certificate: certFile/keyFile)" rather than a bare alert name.
fn tls_message(err: &rustls::Error) -> String {
    let hint = match err {
        rustls::Error::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::CertificateRequired
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate,
        ) => CERTIFICATE_REFUSED,
        rustls::Error::InvalidCertificate(_) => {
            " (the member's certificate is not signed by caFile's CA or does not name the endpoint's host)"
        }
        _ => "",
    };
    format!("TLS: {err}{hint}")
}
