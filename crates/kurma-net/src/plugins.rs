//! Starting, re-adopting and stopping the plugin containers, and running an executable in
//! one.

use std::path::Path;

use crate::config::NetworkEntry;
use crate::error::{Error, Result};
use crate::fetch::Fetcher;
use crate::host::Host;
use crate::registry;
use crate::runtime::{bundle_config, NETNS_DIR};
use crate::source::{ImageSource, PullError};
use crate::state::{private_dir, write_record, PluginRecord};
use kurma_model::image::{self, oci};

/// What [`Host::start_plugins`] did for one network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginStart {
    /// A new container from a freshly unpacked image.
    Started,
    /// A container from before (e.g. before the host side restarted) kept running.
    Adopted,
    /// The container was gone; a new one runs on the bundle it left.
    Recreated,
}

impl Host {
    /// Makes every network's plugin container run and runs `setup` in each (again, for
    /// adopted ones: the spec's re-validation after a restart).
    ///
    /// A container that still runs is adopted. One that is gone (say, after a reboot) but
    /// whose bundle is there for the same image is created again on that bundle, so what
    /// the plugin keeps in its filesystem (address reservations) survives. Everything else
    /// gets a fresh image. All images are fetched and unpacked before any container is
    /// created, so a missing or broken image starts nothing. A `setup` that fails or runs
    /// past the limit tears its container down, together with the containers this call
    /// started before it.
    pub fn start_plugins(&self) -> Result<Vec<(String, PluginStart)>> {
        let mut plan = Vec::new();
        for network in &self.config.networks {
            let id = self.container_id(&network.name);
            let same_image =
                self.state.read_plugin(&network.name)?.is_some_and(|r| r.image == network.image_uri());
            let how =
                if same_image && matches!(self.runtime.status(&id).as_deref(), Some("created" | "running")) {
                    PluginStart::Adopted
                } else if same_image && self.state.plugin_dir(&network.name).join("bundle/rootfs").is_dir() {
                    PluginStart::Recreated
                } else {
                    PluginStart::Started
                };
            plan.push((network, how));
        }
        for (index, (network, how)) in plan.iter().enumerate() {
            if *how != PluginStart::Started {
                continue;
            }
            if let Err(err) = self.prepare_bundle(network) {
                // Leave nothing of this call behind: the bundles prepared so far go too.
                for (prepared, how) in &plan[..=index] {
                    if *how == PluginStart::Started {
                        let _ = self.stop_plugin(&prepared.name);
                    }
                }
                return Err(err);
            }
        }
        std::fs::create_dir_all(NETNS_DIR).map_err(Error::io(NETNS_DIR))?;
        let mut started = Vec::new();
        for (network, how) in plan {
            let created = match how {
                PluginStart::Adopted => Ok(()),
                PluginStart::Recreated | PluginStart::Started => self.create_container(network),
            };
            match created.and_then(|()| self.run(network, "setup", &[])) {
                Ok(_) => started.push((network.name.clone(), how)),
                Err(err) => {
                    let _ = self.stop_plugin(&network.name);
                    for (name, how) in &started {
                        if *how == PluginStart::Started {
                            let _ = self.stop_plugin(name);
                        }
                    }
                    return Err(err);
                }
            }
        }
        Ok(started)
    }

    /// Removes `network`'s plugin container, its bundle and its record.
    pub fn stop_plugin(&self, network: &str) -> Result<()> {
        self.runtime.delete(&self.container_id(network)).map_err(|source| Error::Runtime {
            runtime: self.options.runtime.display().to_string(),
            source,
        })?;
        let dir = self.state.plugin_dir(network);
        match std::fs::remove_dir_all(&dir) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::Io { path: dir, source: err })
            }
            _ => Ok(()),
        }
    }

    /// Stops every configured network's plugin container (all attempted).
    pub fn stop_plugins(&self) -> Result<()> {
        let errors: Vec<String> = self
            .config
            .networks
            .iter()
            .filter_map(|n| self.stop_plugin(&n.name).err().map(|e| e.to_string()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Config(format!("stopping plugins: {}", errors.join("; "))))
        }
    }

    /// Fetches and unpacks `network`'s image into a fresh bundle.
    fn prepare_bundle(&self, network: &NetworkEntry) -> Result<()> {
        let _ = self.runtime.delete(&self.container_id(&network.name));
        let dir = self.state.plugin_dir(&network.name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))?;
        }
        let bundle = dir.join("bundle");
        let download_dir = dir.join("download");
        for private in [&dir, &bundle, &download_dir] {
            private_dir(private)?;
        }
        let fail = |source: PullError| Error::Image {
            network: network.name.clone(),
            uri: network.image_uri().to_string(),
            source: Box::new(source),
        };
        let rootfs = bundle.join("rootfs");
        match &network.image {
            ImageSource::File(path) => unpack_file(path, &download_dir, &rootfs).map_err(fail)?,
            ImageSource::Http(image) => {
                let file = download_dir.join("image");
                image.download(&self.fetcher().map_err(fail)?, &file).map_err(fail)?;
                unpack_file(&file, &download_dir, &rootfs).map_err(fail)?;
            }
            ImageSource::Docker(reference) => {
                let layout = download_dir.join("layout");
                registry::pull(&self.fetcher().map_err(fail)?, reference, &layout).map_err(fail)?;
                let image = oci::read_layout(&layout, None).map_err(|e| fail(e.into()))?;
                oci::unpack_rootfs(&image, &rootfs).map_err(|e| fail(e.into()))?;
            }
        }
        let _ = std::fs::remove_dir_all(&download_dir);
        for executable in ["setup", "add", "del"] {
            // A symlink counts: it resolves inside the container, not on the host.
            if std::fs::symlink_metadata(rootfs.join("opt/network").join(executable)).is_err() {
                return Err(fail(PullError::NoExecutable { executable }));
            }
        }
        Ok(())
    }

    /// The HTTP client for one image fetch, with this host's limits and CA file.
    fn fetcher(&self) -> Result<Fetcher, PullError> {
        Ok(Fetcher::new(self.options.fetch_limits, self.options.ca_file.as_deref())?)
    }

    /// Creates `network`'s container on its bundle (with a config.json for the current
    /// options) and records it.
    fn create_container(&self, network: &NetworkEntry) -> Result<()> {
        let id = self.container_id(&network.name);
        let _ = self.runtime.delete(&id); // a stale (stopped) container of that name
        let bundle = self.state.plugin_dir(&network.name).join("bundle");
        let config = bundle_config(self.options.host_netns.as_deref());
        let config_path = bundle.join("config.json");
        write_record(&config_path, &config)?;
        self.runtime.create(&id, &bundle).map_err(|why| Error::Network {
            network: network.name.clone(),
            message: format!("cannot create the plugin container: {why}"),
        })?;
        self.state.write_plugin(&PluginRecord {
            network: network.name.clone(),
            container_id: id,
            image: network.image_uri().to_string(),
        })?;
        Ok(())
    }

    /// Runs `/opt/network/<executable> args…` in `network`'s plugin container with the
    /// network's entry on stdin; returns its stdout, or an error carrying the exit code (or
    /// timeout) and both outputs.
    pub(crate) fn run(
        &self,
        network: &NetworkEntry,
        executable: &'static str,
        args: &[&str],
    ) -> Result<String> {
        let path = format!("/opt/network/{executable}");
        let mut argv = vec![path.as_str()];
        argv.extend_from_slice(args);
        let scratch = self.state.scratch(&format!("{}-{executable}", network.name));
        let output = self
            .runtime
            .exec(&self.container_id(&network.name), &argv, &network.stdin(), self.options.limit, &scratch)
            .map_err(|why| Error::Network { network: network.name.clone(), message: why.to_string() })?;
        match output.outcome {
            Ok(()) => Ok(output.stdout),
            Err(failure) => Err(Error::Executable {
                network: network.name.clone(),
                executable,
                failure,
                stdout: output.stdout,
                stderr: output.stderr,
            }),
        }
    }
}

fn unpack_file(path: &Path, scratch_parent: &Path, rootfs: &Path) -> Result<(), PullError> {
    if !path.is_file() {
        return Err(PullError::NoSuchFile { path: path.to_path_buf() });
    }
    Ok(image::unpack_file(path, &scratch_parent.join("archive"), rootfs).map(drop)?)
}
