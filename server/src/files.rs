//! Policies from watched files (`--policies FILE|DIR`: sluicegate's TOML and Envoy's
//! YAML; `--envoy-config`: Envoy's YAML; `--limitador-config`: limitador's limits file),
//! read at start and then whenever one changes.
//!
//! Changes are found by polling, every [`POLL`], the name, length and modification time
//! of each file (a directory listed again each time), not by the OS's notifications:
//! those miss edits on network and container-mounted volumes and Kubernetes' swap of a
//! ConfigMap's symlink, and need a dependency per platform; a few `stat`s four times a
//! second cost nothing and bound the delay (two polls, then the read) under a second.
//! A change is read once it is unchanged across two polls (a file rewritten in place in
//! several writes is not read half-written; replacing files by a rename, as
//! Kubernetes' ConfigMap swap does, is atomic), and applied whole or not at all: one
//! invalid file keeps every previous policy, logs the error (file, line, column) and
//! counts it in `/metrics`. Hidden files (`.name.yaml`, an editor's) are not read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sluicegate_policy::envoy::{self, EnvoyError};
use sluicegate_policy::limitador::{self, LimitadorError};
use sluicegate_policy::{listed, FileError, PolicyFile};

use crate::limiters::{check_backend, Backend};
use crate::service::{check_name, validate, Loaded, Service};

/// How often the files are looked at.
pub(crate) const POLL: Duration = Duration::from_millis(250);

/// Where policies are read from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sources {
    /// `--policies`: a TOML or YAML file, or a directory of them.
    pub(crate) policies: Option<PathBuf>,
    /// `--envoy-config`: a YAML file, or a directory of them.
    pub(crate) envoy: Option<PathBuf>,
    /// `--limitador-config`: limitador's limits file.
    pub(crate) limitador: Option<PathBuf>,
}

/// What a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Toml,
    Envoy,
    Limitador,
}

/// Why the policy files were refused (the first problem found); each names the file.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// A file of sluicegate's policies cannot be read or is not valid.
    #[error(transparent)]
    File(#[from] FileError),
    /// An Envoy configuration file cannot be read or is not valid.
    #[error(transparent)]
    Envoy(Box<EnvoyError>),
    /// limitador's limits file cannot be read or is not valid.
    #[error(transparent)]
    Limitador(Box<LimitadorError>),
    /// A policy of a valid file cannot be served.
    #[error("{file}: policy {policy:?}: {why}")]
    Policy {
        /// The file.
        file: String,
        /// The policy.
        policy: String,
        /// Why not.
        why: String,
    },
}

impl From<LimitadorError> for FilesError {
    fn from(e: LimitadorError) -> Self {
        Self::Limitador(Box::new(e))
    }
}

impl From<EnvoyError> for FilesError {
    fn from(e: EnvoyError) -> Self {
        Self::Envoy(Box::new(e))
    }
}

/// One file as last seen: its path, length and modification time.
type Seen = (PathBuf, u64, Option<SystemTime>);

fn is_toml(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "toml")
}

/// An editor's or a tool's hidden file (`.name.yaml`, `.name.swp`): never a policy file.
fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with('.'))
}

impl Sources {
    /// The sources `config` names.
    pub(crate) fn of(config: &crate::Config) -> Self {
        Self {
            policies: config.policies.clone(),
            envoy: config.envoy_config.clone(),
            limitador: config.limitador_config.clone(),
        }
    }

    /// Whether any source is given.
    pub(crate) fn any(&self) -> bool {
        self.policies.is_some() || self.envoy.is_some() || self.limitador.is_some()
    }

    /// Every file to read, and what it holds.
    fn files(&self) -> Result<Vec<(PathBuf, Format)>, FileError> {
        let mut files = Vec::new();
        if let Some(path) = &self.policies {
            let found = listed(path, |f| !is_hidden(f) && (is_toml(f) || envoy::is_yaml(f)))?;
            files.extend(found.into_iter().map(|f| {
                let format = if envoy::is_yaml(&f) {
                    Format::Envoy
                } else {
                    Format::Toml
                };
                (f, format)
            }));
        }
        if let Some(path) = &self.envoy {
            let found = listed(path, |f| !is_hidden(f) && envoy::is_yaml(f))?;
            files.extend(found.into_iter().map(|f| (f, Format::Envoy)));
        }
        if let Some(path) = &self.limitador {
            files.push((path.clone(), Format::Limitador));
        }
        Ok(files)
    }

    /// The files as they are now; `None` where the listing cannot be read.
    fn seen(&self) -> Option<Vec<Seen>> {
        let files = self.files().ok()?;
        Some(
            files
                .into_iter()
                .map(|(path, _)| {
                    let meta = std::fs::metadata(&path).ok();
                    let len = meta.as_ref().map_or(0, std::fs::Metadata::len);
                    let modified = meta.and_then(|m| m.modified().ok());
                    (path, len, modified)
                })
                .collect(),
        )
    }

    /// Reads and checks every file, as `backend` can run it; the first problem found
    /// refuses them all.
    pub(crate) fn load(&self, backend: &dyn Backend) -> Result<Loaded, FilesError> {
        let mut loaded = Loaded::default();
        for (path, format) in self.files()? {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(&path).map_err(|error| FileError::Read {
                path: name.clone(),
                error,
            })?;
            match format {
                Format::Envoy => {
                    loaded.envoy.add(&name, &text)?;
                    continue;
                }
                Format::Limitador => {
                    loaded.limitador = limitador::Config::parse(&name, &text)?;
                    continue;
                }
                Format::Toml => {}
            }
            for (policy_name, policy) in PolicyFile::parse_built(&name, &text)?.policies {
                let at = |why: String| FilesError::Policy {
                    file: name.clone(),
                    policy: policy_name.clone(),
                    why,
                };
                check_name(&policy_name, "name").map_err(|e| at(e.to_string()))?;
                validate(&policy).map_err(|e| at(e.to_string()))?;
                check_backend(&policy, backend).map_err(|e| at(e.why))?;
                if let Some((other, _)) = loaded.policies.get(&policy_name) {
                    return Err(at(format!("defined in {other} too")));
                }
                loaded.policies.insert(policy_name, (name.clone(), policy));
            }
        }
        Ok(loaded)
    }
}

/// Applies every change of the files of `sources` to `service`, forever.
pub(crate) async fn watch(service: Arc<Service>, sources: Sources) {
    // Read again at the first tick: a change made since the start is not missed.
    let (mut applied, mut previous) = (None, None);
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = sources.seen();
        // A file written in place in several writes is read once it stays unchanged for
        // a poll, never half-written.
        let stable = previous.as_ref() == Some(&now);
        previous = Some(now.clone());
        if !stable || applied.as_ref() == Some(&now) {
            continue;
        }
        applied = Some(now);
        match sources.load(&*service.backend) {
            Ok(loaded) => {
                tracing::info!("policy files changed: applied");
                service.set_files(loaded).await;
            }
            Err(e) => {
                tracing::error!(error = %e, "policy files changed: refused, the previous policies kept");
                service.metrics.policy_reload_error();
            }
        }
    }
}
