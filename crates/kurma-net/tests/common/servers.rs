//! Image servers the tests start on 127.0.0.1: a tiny static HTTP server and Debian's
//! `docker-registry` (distribution) with a temporary storage directory.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::images::{sha256, TestImage};

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

/// Debian's docker-registry listening on 127.0.0.1; killed when dropped.
pub struct Registry {
    pub addr: String,
    child: Child,
}

impl Registry {
    pub fn start(dir: &Path) -> Registry {
        let binary = "/usr/bin/docker-registry";
        assert!(Path::new(binary).is_file(), "{binary} is missing: install Debian's docker-registry");
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let config = dir.join("registry.yml");
        std::fs::create_dir_all(dir.join("storage")).unwrap();
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
                dir.join("storage").display()
            ),
        )
        .unwrap();
        let child = Command::new(binary)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let registry = Registry { addr, child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while ureq::get(&format!("http://{}/v2/", registry.addr)).call().is_err() {
            assert!(Instant::now() < deadline, "docker-registry did not come up on {}", registry.addr);
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    /// Pushes `image` as `repository:tag` through the registry API.
    pub fn push(&self, repository: &str, tag: &str, image: &TestImage) {
        for blob in [&image.layer, &image.config] {
            let start =
                ureq::post(&format!("http://{}/v2/{repository}/blobs/uploads/", self.addr)).call().unwrap();
            let location = start.header("Location").unwrap().to_string();
            let location = if location.starts_with("http") {
                location
            } else {
                format!("http://{}{location}", self.addr)
            };
            let separator = if location.contains('?') { '&' } else { '?' };
            ureq::put(&format!("{location}{separator}digest={}", sha256(blob)))
                .set("Content-Type", "application/octet-stream")
                .send_bytes(blob)
                .unwrap();
        }
        ureq::put(&format!("http://{}/v2/{repository}/manifests/{tag}", self.addr))
            .set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            .send_bytes(&image.manifest)
            .unwrap();
        let mut check = Vec::new();
        ureq::get(&format!("http://{}/v2/{repository}/blobs/{}", self.addr, sha256(&image.layer)))
            .call()
            .unwrap()
            .into_reader()
            .read_to_end(&mut check)
            .unwrap();
        assert_eq!(check, image.layer, "the registry serves the pushed layer");
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
