//! Image servers the tests start on 127.0.0.1: a tiny static HTTP server and Debian's
//! `docker-registry` (distribution) with a temporary storage directory.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_testkit::ns::TestNetns;
use serde_json::Value;

use super::tls::TestCert;

const REGISTRY: &str = "/usr/bin/docker-registry";

/// Serves the files of a directory at `http://127.0.0.1:PORT/NAME`; stops when dropped.
pub struct FileServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl FileServer {
    pub fn start(dir: PathBuf) -> FileServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => serve(stream, &dir),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        FileServer { port, stop }
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(stream: TcpStream, dir: &Path) {
    stream.set_nonblocking(false).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 2 {
        line.clear();
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_string();
    let mut stream = stream;
    match std::fs::read(dir.join(&path)) {
        Ok(body) if !path.contains("..") => {
            write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
                .unwrap();
            stream.write_all(&body).unwrap();
        }
        _ => write!(stream, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .unwrap(),
    }
}

/// Debian's docker-registry with a temporary storage directory; killed when dropped.
pub struct Registry {
    /// `host:port`, as a `docker://` reference names it.
    pub addr: String,
    /// `http://addr` or `https://addr`.
    base: String,
    /// What the test speaks to it with (trusting its CA when it has one).
    agent: ureq::Agent,
    child: Child,
}

impl Registry {
    /// A plain-HTTP registry on 127.0.0.1.
    pub fn start(dir: &Path) -> Registry {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let registry =
            Registry::spawn(dir, Command::new(REGISTRY), &addr, "", ureq::Agent::new_with_defaults());
        registry.wait_until_up();
        registry
    }

    /// An https registry on `ip:5000` inside `ns`, with a certificate for `ip` signed by
    /// `cert`'s CA. Speak to it from inside `ns` (`TestNetns::run`).
    pub fn start_tls(dir: &Path, ns: &TestNetns, ip: &str, cert: &TestCert) -> Registry {
        let tls =
            format!("  tls:\n    certificate: {}\n    key: {}\n", cert.cert.display(), cert.key.display());
        let registry = Registry::spawn(dir, ns.command(REGISTRY), &format!("{ip}:5000"), &tls, cert.agent());
        ns.run(|| registry.wait_until_up()).unwrap();
        registry
    }

    fn spawn(dir: &Path, mut command: Command, addr: &str, tls: &str, agent: ureq::Agent) -> Registry {
        assert!(Path::new(REGISTRY).is_file(), "{REGISTRY} is missing: install Debian's docker-registry");
        let config = dir.join("registry.yml");
        std::fs::create_dir_all(dir.join("storage")).unwrap();
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n{tls}",
                dir.join("storage").display()
            ),
        )
        .unwrap();
        let child =
            command.arg("serve").arg(&config).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let scheme = if tls.is_empty() { "http" } else { "https" };
        Registry { addr: addr.to_string(), base: format!("{scheme}://{addr}"), agent, child }
    }

    fn wait_until_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.agent.get(format!("{}/v2/", self.base)).call().is_err() {
            assert!(Instant::now() < deadline, "docker-registry did not come up on {}", self.base);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Pushes the image of the OCI image archive `archive` as `repository:tag` through the
    /// registry API (blobs by digest, then the manifest).
    pub fn push_archive(&self, repository: &str, tag: &str, archive: &Path) {
        let layout = archive.with_extension("push-stage");
        tar::Archive::new(std::fs::File::open(archive).unwrap()).unpack(&layout).unwrap();
        let blob = |digest: &str| {
            std::fs::read(layout.join("blobs/sha256").join(&digest["sha256:".len()..])).unwrap()
        };
        let index: Value =
            serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
        let descriptor = &index["manifests"][0];
        let manifest_bytes = blob(descriptor["digest"].as_str().unwrap());
        let manifest: Value = serde_json::from_slice(&manifest_bytes).unwrap();
        let mut digests = vec![manifest["config"]["digest"].as_str().unwrap().to_string()];
        for layer in manifest["layers"].as_array().unwrap() {
            digests.push(layer["digest"].as_str().unwrap().to_string());
        }
        for digest in &digests {
            let start = self
                .agent
                .post(format!("{}/v2/{repository}/blobs/uploads/", self.base))
                .send_empty()
                .unwrap();
            let location = start.headers()["Location"].to_str().unwrap().to_string();
            let location =
                if location.starts_with("http") { location } else { format!("{}{location}", self.base) };
            let separator = if location.contains('?') { '&' } else { '?' };
            self.agent
                .put(format!("{location}{separator}digest={digest}"))
                .header("Content-Type", "application/octet-stream")
                .send(&blob(digest)[..])
                .unwrap();
        }
        let media_type =
            descriptor["mediaType"].as_str().unwrap_or("application/vnd.oci.image.manifest.v1+json");
        self.agent
            .put(format!("{}/v2/{repository}/manifests/{tag}", self.base))
            .header("Content-Type", media_type)
            .send(&manifest_bytes[..])
            .unwrap();
        // The registry now serves what was pushed, byte for byte.
        let mut served = Vec::new();
        let layer = &digests[1];
        self.agent
            .get(format!("{}/v2/{repository}/blobs/{layer}", self.base))
            .call()
            .unwrap()
            .into_body()
            .into_reader()
            .read_to_end(&mut served)
            .unwrap();
        assert_eq!(kurma_model::image::oci::Digest::of(&served).to_string(), *layer);
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
