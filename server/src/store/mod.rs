//! Where policies, apps, users and the audit log live: SQLite under `--data-dir` (the
//! embedded default) or PostgreSQL (`--store postgres://…`, shared by a fleet).
//!
//! Both run the same SQL through sqlx's `Any` driver: one code path, so the fleet's
//! store is exactly the tested embedded one. Every change bumps one counter in the same
//! transaction; servers poll it (see [`Store::counter`]) and reload when it moved, so a
//! change reaches every server within the poll interval, without a restart. The counter
//! also numbers audit entries (no dialect's auto-increment needed).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

mod accounts;
mod reports;
mod url;

pub(crate) use accounts::{Account, Facts};
pub(crate) use reports::{Claim, Remembered, ReportId};
pub(crate) use url::check_url;

use crate::time::rfc3339;
use sluicegate_policy::{Policy, Style};

/// A store failure: the database is unreachable or refused a statement.
#[derive(Debug, thiserror::Error)]
#[error("store unavailable: {0}")]
pub struct StoreError(String);

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        Self(e.to_string())
    }
}

/// A role in an app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    /// Reads policies, stats and audit of the app.
    Viewer,
    /// A viewer who also creates, changes and deletes the app's policies.
    Owner,
}

/// A user: an admin flag and a role per app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    /// The name.
    pub name: String,
    /// Manages users and apps, and everything else.
    pub admin: bool,
    /// The role in each app.
    pub roles: BTreeMap<String, Role>,
}

/// A stored policy and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    /// The name.
    pub name: String,
    /// The policy.
    pub policy: Policy,
    /// Starts at 1, grows by one with each change.
    pub version: i64,
    /// Who created it.
    pub created_by: String,
    /// Who changed it last.
    pub updated_by: String,
    /// When it was created, in seconds since the Unix epoch.
    pub created_at: i64,
    /// When it was changed last, in seconds since the Unix epoch.
    pub updated_at: i64,
    /// The file it is read from (`--policies`), if it is not in the store: such a
    /// policy is changed by editing its file, never through the API.
    pub file: Option<String>,
}

impl Stored {
    /// Policy `name` as the file `file` defines it: version 0, by `file:` and the path.
    pub(crate) fn from_file(name: &str, file: &str, policy: &Policy) -> Self {
        Self {
            name: name.to_owned(),
            policy: policy.clone(),
            version: 0,
            created_by: format!("file:{file}"),
            updated_by: format!("file:{file}"),
            created_at: 0,
            updated_at: 0,
            file: Some(file.to_owned()),
        }
    }

    /// The policy as the API and the audit log show it: the file's fields plus metadata.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        use serde_json::{json, Value};
        let mut value = serde_json::to_value(&self.policy).unwrap_or_else(|_| json!({}));
        if let Value::Object(map) = &mut value {
            // Always present at the top (a composite's members leave them out).
            map.insert("apps".into(), json!(self.policy.apps));
            map.insert("description".into(), json!(self.policy.description));
            for field in sluicegate_policy::STORED_FIELDS {
                if let Some(meta) = self.metadata(field) {
                    map.insert(field.into(), meta);
                }
            }
        }
        value
    }

    /// The metadata field named in [`sluicegate_policy::STORED_FIELDS`], where it is set.
    fn metadata(&self, field: &str) -> Option<serde_json::Value> {
        use serde_json::json;
        Some(match field {
            "name" => json!(self.name),
            "version" => json!(self.version),
            "created_by" => json!(self.created_by),
            "updated_by" => json!(self.updated_by),
            "created_at" => json!(rfc3339(self.created_at)),
            "updated_at" => json!(rfc3339(self.updated_at)),
            "file" => json!(self.file.as_ref()?),
            _ => return None,
        })
    }
}

/// Who a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Principal {
    /// An app (decides).
    App(String),
    /// A user (manages).
    User(String),
}

/// Everything the servers keep in memory: policies, apps, users, tokens, as of
/// `counter`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// The change counter this snapshot reflects.
    pub counter: i64,
    /// Policies by name.
    pub policies: BTreeMap<String, Stored>,
    /// App names.
    pub apps: Vec<String>,
    /// Users by name.
    pub users: BTreeMap<String, User>,
    /// Token digest → its holder.
    pub tokens: HashMap<crate::token::Digest, Principal>,
    /// Stored rows this read could not read (logged, skipped, counted as store errors).
    pub unreadable: usize,
}

impl Snapshot {
    /// Adds the policy a row holds, or counts it unreadable.
    fn add_policy(&mut self, row: &AnyRow) {
        match stored(row) {
            Ok(policy) => {
                self.policies.insert(policy.name.clone(), policy);
            }
            Err(e) => {
                tracing::error!(error = %e, "skipping a policy the store holds but this server cannot read");
                self.unreadable += 1;
            }
        }
    }
}

/// The policies changed after change `from` up to change `to`, if every change between
/// was a policy's create, update or delete, each with its audit entry; `None` if any
/// was not (an app or user change may touch policies too) or has no entry.
async fn policies_changed(
    tx: &mut Tx,
    from: i64,
    to: i64,
) -> Result<Option<BTreeSet<String>>, StoreError> {
    let rows =
        sqlx::query("SELECT action, policy FROM sluicegate_audit WHERE id > $1 AND id <= $2")
            .bind(from)
            .bind(to)
            .fetch_all(&mut **tx)
            .await?;
    if i64::try_from(rows.len()).ok() != to.checked_sub(from) {
        return Ok(None);
    }
    let mut names = BTreeSet::new();
    for row in &rows {
        let action: String = row.try_get(0)?;
        if !matches!(action.as_str(), "create" | "update" | "delete") {
            return Ok(None);
        }
        names.insert(row.try_get(1)?);
    }
    Ok(Some(names))
}

/// One entry of the audit log.
#[derive(Debug, Clone)]
pub(crate) struct AuditEntry {
    /// Grows with every change.
    pub id: i64,
    /// When, in seconds since the Unix epoch.
    pub at: i64,
    /// Who.
    pub actor: String,
    /// A policy's `create`, `update` or `delete`; `app.create`, `app.rotate`,
    /// `app.delete`; `user.create`, `user.roles`, `user.rotate`, `user.delete`.
    pub action: String,
    /// The name of the policy, app or user changed.
    pub subject: String,
    /// What it was before (JSON), if it existed and is worth showing.
    pub before: Option<serde_json::Value>,
    /// What it is after (JSON), likewise.
    pub after: Option<serde_json::Value>,
    /// The apps either version lists.
    pub apps: Vec<String>,
}

/// An audit entry as a write appends it, in the write's transaction.
struct Entry<'a> {
    /// The write's number (the change counter).
    id: i64,
    at: i64,
    actor: &'a str,
    action: &'a str,
    /// The policy, app or user changed.
    subject: &'a str,
    before: Option<serde_json::Value>,
    after: Option<serde_json::Value>,
    /// Whose roles may read it (none: admins only).
    apps: &'a [String],
}

impl Entry<'_> {
    async fn append(&self, tx: &mut Tx) -> Result<(), sqlx::Error> {
        sqlx::query("INSERT INTO sluicegate_audit (id, at, actor, action, policy, before_body, after_body, apps) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
            .bind(self.id)
            .bind(self.at)
            .bind(self.actor)
            .bind(self.action)
            .bind(self.subject)
            .bind(self.before.as_ref().map(ToString::to_string))
            .bind(self.after.as_ref().map(ToString::to_string))
            .bind(serde_json::to_string(self.apps).unwrap_or_default())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

/// What a write refused, decided inside its transaction.
#[derive(Debug)]
pub(crate) enum WriteError<E> {
    /// The database failed.
    Store(StoreError),
    /// The caller's check refused (permission, version).
    Refused(E),
}

impl<E> From<sqlx::Error> for WriteError<E> {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(e.into())
    }
}

/// The schema. Every statement is valid SQLite and PostgreSQL; re-running it changes
/// nothing.
const SCHEMA: [&str; 8] = [
    "CREATE TABLE IF NOT EXISTS sluicegate_meta (id BIGINT PRIMARY KEY, schema_version BIGINT NOT NULL, counter BIGINT NOT NULL)",
    "INSERT INTO sluicegate_meta (id, schema_version, counter) VALUES (1, 1, 0) ON CONFLICT (id) DO NOTHING",
    "CREATE TABLE IF NOT EXISTS sluicegate_policies (name TEXT PRIMARY KEY, body TEXT NOT NULL, version BIGINT NOT NULL, created_by TEXT NOT NULL, updated_by TEXT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sluicegate_apps (name TEXT PRIMARY KEY, token_hash TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sluicegate_users (name TEXT PRIMARY KEY, token_hash TEXT NOT NULL, admin TEXT NOT NULL, roles TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sluicegate_audit (id BIGINT PRIMARY KEY, at BIGINT NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL, policy TEXT NOT NULL, before_body TEXT, after_body TEXT, apps TEXT NOT NULL)",
    // Reports' ids (see `reports`): `cost` is set by the one report that applies.
    "CREATE TABLE IF NOT EXISTS sluicegate_reports (app TEXT NOT NULL, id TEXT NOT NULL, created_at BIGINT NOT NULL, policy TEXT NOT NULL, rate_key TEXT NOT NULL, estimate BIGINT NOT NULL, cost BIGINT, recorded BIGINT, dropped BIGINT, PRIMARY KEY (app, id))",
    // The prune finds old ids without reading every row.
    "CREATE INDEX IF NOT EXISTS sluicegate_reports_created ON sluicegate_reports (created_at)",
];

/// The tables as they were named under the product's working name: a store written then
/// keeps its data, its tables renamed when a server first opens it.
const FORMER_TABLES: [(&str, &str); 5] = [
    ("tollgate_meta", "sluicegate_meta"),
    ("tollgate_policies", "sluicegate_policies"),
    ("tollgate_apps", "sluicegate_apps"),
    ("tollgate_users", "sluicegate_users"),
    ("tollgate_audit", "sluicegate_audit"),
];

/// The embedded store's file under the working name (with SQLite's WAL siblings).
const FORMER_FILE: &str = "tollgate.db";

/// The schema version this build writes.
const SCHEMA_VERSION: i64 = 1;

/// How long a statement may wait for a connection before the store counts as down.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// The database.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    /// Writes, and the reads inside them.
    pool: AnyPool,
    /// The snapshot and the counter: on SQLite, connections of their own reading in
    /// WAL mode beside the writer (they see the last commit without blocking the next);
    /// on PostgreSQL, `pool`.
    reads: AnyPool,
    /// The audit log's scans, on connections of their own: however many run at once,
    /// they hold up only each other, never a write or a reload.
    audit: AnyPool,
}

/// Connections of `reads` on SQLite, and of `audit`.
const READERS: u32 = 2;

/// A pool of `max` connections to `url` that cannot write.
async fn read_only(url: &str, max: u32) -> Result<AnyPool, sqlx::Error> {
    let statement = if url.starts_with("sqlite:") {
        "PRAGMA query_only = ON"
    } else {
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"
    };
    AnyPoolOptions::new()
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .max_connections(max)
        .after_connect(move |con, _| {
            Box::pin(async move { sqlx::query(statement).execute(con).await.map(drop) })
        })
        .connect(url)
        .await
}

type Tx = sqlx::Transaction<'static, sqlx::Any>;

/// Creates `dir` (0700) and the database file `db` (0600) if they do not exist: tokens'
/// hashes and the audit log are for this server's user only. SQLite gives its journal
/// files the database's mode.
fn private_files(dir: &std::path::Path, db: &std::path::Path) -> std::io::Result<()> {
    let mut folder = std::fs::DirBuilder::new();
    let mut file = std::fs::OpenOptions::new();
    file.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        folder.mode(0o700);
        file.mode(0o600);
    }
    folder.recursive(true).create(dir)?;
    file.open(db).map(drop)
}

/// Renames the embedded store's file written under the working name (and its WAL
/// siblings) to `path`, when only the former exists.
fn adopt_former_file(dir: &std::path::Path, path: &std::path::Path) -> std::io::Result<()> {
    let former = dir.join(FORMER_FILE);
    if path.exists() || !former.exists() {
        return Ok(());
    }
    for suffix in ["-wal", "-shm"] {
        let sibling = dir.join(format!("{FORMER_FILE}{suffix}"));
        if sibling.exists() {
            std::fs::rename(sibling, format!("{}{suffix}", path.display()))?;
        }
    }
    std::fs::rename(former, path)
}

impl Store {
    /// Opens the store `url` (`sqlite://PATH?mode=rwc` or `postgres://…`) and creates or
    /// migrates its schema.
    pub(crate) async fn open(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let sqlite = url.starts_with("sqlite:");
        // SQLite takes one writer at a time: one connection serializes them here instead
        // of failing with "database is locked".
        let pool = AnyPoolOptions::new()
            .max_connections(if sqlite { 1 } else { 8 })
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect(url)
            .await?;
        let reads = if sqlite {
            // Kept by the file: readers and the writer no longer wait for each other.
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await?;
            read_only(url, READERS).await?
        } else {
            pool.clone()
        };
        let audit = read_only(url, READERS).await?;
        let store = Self { pool, reads, audit };
        // Servers starting together race to create the tables (PostgreSQL may refuse
        // the loser's `CREATE TABLE IF NOT EXISTS`); the schema is idempotent, so retry.
        let mut tries = 0;
        loop {
            match store.migrate(sqlite).await {
                Ok(()) => return Ok(store),
                Err(_) if tries < 3 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The store under `dir`: `dir/sluicegate.db`, the directory created if missing.
    pub(crate) async fn open_dir(dir: &std::path::Path) -> Result<Self, StoreError> {
        let path = dir.join("sluicegate.db");
        adopt_former_file(dir, &path)
            .map_err(|e| StoreError(format!("cannot rename {FORMER_FILE}: {e}")))?;
        private_files(dir, &path)
            .map_err(|e| StoreError(format!("cannot create {}: {e}", path.display())))?;
        let path = path
            .to_str()
            .ok_or_else(|| StoreError(format!("{} is not UTF-8", path.display())))?;
        Self::open(&format!("sqlite://{}?mode=rwc", url_path(path))).await
    }

    async fn migrate(&self, sqlite: bool) -> Result<(), StoreError> {
        self.adopt_former_tables(sqlite).await?;
        for statement in SCHEMA {
            sqlx::query(statement).execute(&self.pool).await?;
        }
        let row = sqlx::query("SELECT schema_version FROM sluicegate_meta WHERE id = 1")
            .fetch_one(&self.pool)
            .await?;
        let version: i64 = row.try_get(0)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError(format!(
                "the store's schema is version {version}, newer than this server's {SCHEMA_VERSION}: upgrade the server"
            )));
        }
        Ok(())
    }

    /// Renames the tables of a store written under the working name, in one transaction
    /// (so two servers opening it at once rename it once); a store that has both keeps
    /// them as they are.
    async fn adopt_former_tables(&self, sqlite: bool) -> Result<(), StoreError> {
        let exists = if sqlite {
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = $1"
        } else {
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1"
        };
        let mut tx = self.pool.begin().await?;
        for (former, current) in FORMER_TABLES {
            let mut found = [false; 2];
            for (name, found) in [former, current].into_iter().zip(&mut found) {
                let row = sqlx::query(exists).bind(name).fetch_one(&mut *tx).await?;
                *found = row.try_get::<i64, _>(0)? > 0;
            }
            if found == [true, false] {
                sqlx::query(&format!("ALTER TABLE {former} RENAME TO {current}"))
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// The change counter: it moves with every change, in the change's transaction.
    pub(crate) async fn counter(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT counter FROM sluicegate_meta WHERE id = 1")
            .fetch_one(&self.reads)
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Everything the servers keep in memory, read in one transaction. From `old`, when
    /// every change since it is a policy's, only those policies are read again (the
    /// audit log names each change: its entry's id is the change's number); else
    /// everything.
    pub(crate) async fn snapshot(&self, old: Option<&Snapshot>) -> Result<Snapshot, StoreError> {
        let mut tx = self.reads.begin().await?;
        let counter: i64 = sqlx::query("SELECT counter FROM sluicegate_meta WHERE id = 1")
            .fetch_one(&mut *tx)
            .await?
            .try_get(0)?;
        if let Some(old) = old {
            if let Some(names) = policies_changed(&mut tx, old.counter, counter).await? {
                let mut snapshot = Snapshot {
                    counter,
                    unreadable: 0,
                    ..old.clone()
                };
                for name in names {
                    let row = sqlx::query("SELECT name, body, version, created_by, updated_by, created_at, updated_at FROM sluicegate_policies WHERE name = $1")
                        .bind(&name)
                        .fetch_optional(&mut *tx)
                        .await?;
                    snapshot.policies.remove(&name);
                    if let Some(row) = row {
                        snapshot.add_policy(&row);
                    }
                }
                return Ok(snapshot);
            }
        }
        let mut snapshot = Snapshot {
            counter,
            ..Snapshot::default()
        };
        let rows = sqlx::query("SELECT name, body, version, created_by, updated_by, created_at, updated_at FROM sluicegate_policies")
            .fetch_all(&mut *tx)
            .await?;
        for row in &rows {
            snapshot.add_policy(row);
        }
        for row in sqlx::query("SELECT name, token_hash FROM sluicegate_apps")
            .fetch_all(&mut *tx)
            .await?
        {
            let name: String = row.try_get(0)?;
            let hash: String = row.try_get(1)?;
            // An unreadable hash matches no token: the app stays, nobody can use it.
            match crate::token::parse_hash(&hash) {
                Some(digest) => {
                    snapshot.tokens.insert(digest, Principal::App(name.clone()));
                }
                None => {
                    tracing::error!(app = %name, "an app whose token hash this server cannot read");
                    snapshot.unreadable += 1;
                }
            }
            snapshot.apps.push(name);
        }
        for row in sqlx::query("SELECT name, token_hash, admin, roles FROM sluicegate_users")
            .fetch_all(&mut *tx)
            .await?
        {
            let name: String = row.try_get(0)?;
            let hash: String = row.try_get(1)?;
            let admin: String = row.try_get(2)?;
            let roles: String = row.try_get(3)?;
            let Ok(roles) = serde_json::from_str(&roles) else {
                tracing::error!(user = %name, "skipping a user whose roles this server cannot read");
                snapshot.unreadable += 1;
                continue;
            };
            match crate::token::parse_hash(&hash) {
                Some(digest) => {
                    snapshot
                        .tokens
                        .insert(digest, Principal::User(name.clone()));
                }
                None => {
                    tracing::error!(user = %name, "a user whose token hash this server cannot read");
                    snapshot.unreadable += 1;
                }
            }
            snapshot.users.insert(
                name.clone(),
                User {
                    name,
                    admin: admin != "0",
                    roles,
                },
            );
        }
        tx.commit().await?;
        snapshot.apps.sort();
        Ok(snapshot)
    }

    /// Starts a write: bumps the counter first, so the transaction holds the write lock
    /// from its first statement (SQLite) and its changes are numbered (`id`).
    async fn begin(&self) -> Result<(Tx, i64), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE sluicegate_meta SET counter = counter + 1 WHERE id = 1")
            .execute(&mut *tx)
            .await?;
        let id: i64 = sqlx::query("SELECT counter FROM sluicegate_meta WHERE id = 1")
            .fetch_one(&mut *tx)
            .await?
            .try_get(0)?;
        Ok((tx, id))
    }

    /// Writes policy `name` as `policy` by `actor` at `now`, after `check` approved the
    /// current version (`None`: absent) inside the transaction; `None` deletes. Appends
    /// the audit entry. Returns the stored policy (`None` after a delete).
    pub(crate) async fn write_policy<E>(
        &self,
        name: &str,
        policy: Option<&Policy>,
        actor: &str,
        now: i64,
        check: impl FnOnce(Option<&Stored>) -> Result<(), E>,
    ) -> Result<Option<Stored>, WriteError<E>> {
        let (mut tx, id) = self.begin().await?;
        let current = sqlx::query("SELECT name, body, version, created_by, updated_by, created_at, updated_at FROM sluicegate_policies WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let current = match current {
            Some(row) => Some(stored(&row).map_err(WriteError::Store)?),
            None => None,
        };
        check(current.as_ref()).map_err(WriteError::Refused)?;
        let next = policy.map(|policy| match &current {
            Some(old) => Stored {
                policy: policy.clone(),
                version: old.version + 1,
                updated_by: actor.to_owned(),
                updated_at: now,
                ..old.clone()
            },
            None => Stored {
                name: name.to_owned(),
                policy: policy.clone(),
                version: 1,
                created_by: actor.to_owned(),
                updated_by: actor.to_owned(),
                created_at: now,
                updated_at: now,
                file: None,
            },
        });
        let written = match (&current, &next) {
            (None, None) => 0,
            (None, Some(new)) => {
                sqlx::query("INSERT INTO sluicegate_policies (name, body, version, created_by, updated_by, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (name) DO NOTHING")
                    .bind(name)
                    .bind(body(&new.policy))
                    .bind(new.version)
                    .bind(&new.created_by)
                    .bind(&new.updated_by)
                    .bind(new.created_at)
                    .bind(new.updated_at)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
            (Some(old), Some(new)) => {
                sqlx::query("UPDATE sluicegate_policies SET body = $1, version = $2, updated_by = $3, updated_at = $4 WHERE name = $5 AND version = $6")
                    .bind(body(&new.policy))
                    .bind(new.version)
                    .bind(&new.updated_by)
                    .bind(new.updated_at)
                    .bind(name)
                    .bind(old.version)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
            (Some(old), None) => {
                sqlx::query("DELETE FROM sluicegate_policies WHERE name = $1 AND version = $2")
                    .bind(name)
                    .bind(old.version)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
        };
        if written != 1 {
            // Another writer got in between (impossible under the counter's lock, but
            // never write an audit entry for a change that did not happen).
            return Err(WriteError::Store(StoreError(
                "the policy changed during the write; retry".into(),
            )));
        }
        let action = match (&current, &next) {
            (None, _) => "create",
            (Some(_), Some(_)) => "update",
            (Some(_), None) => "delete",
        };
        let mut apps: Vec<String> = current
            .iter()
            .chain(next.iter())
            .flat_map(|s| s.policy.apps.iter().cloned())
            .collect();
        apps.sort();
        apps.dedup();
        let entry = Entry {
            id,
            at: now,
            actor,
            action,
            subject: name,
            before: current.as_ref().map(Stored::to_json),
            after: next.as_ref().map(Stored::to_json),
            apps: &apps,
        };
        entry.append(&mut tx).await?;
        tx.commit().await?;
        Ok(next)
    }

    /// The newest `limit` audit entries `visible` lets through, older than `before` if
    /// given, newest first.
    pub(crate) async fn audit(
        &self,
        limit: usize,
        before: Option<i64>,
        visible: impl Fn(&AuditEntry) -> bool,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let mut entries = Vec::new();
        // Newest first, a page at a time, until `limit` visible entries are found.
        let mut before = before.unwrap_or(i64::MAX);
        loop {
            let rows = sqlx::query("SELECT id, at, actor, action, policy, before_body, after_body, apps FROM sluicegate_audit WHERE id < $1 ORDER BY id DESC LIMIT 500")
                .bind(before)
                .fetch_all(&self.audit)
                .await?;
            for row in &rows {
                let json = |i: usize| -> Result<Option<serde_json::Value>, StoreError> {
                    let text: Option<String> = row.try_get(i)?;
                    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
                };
                let apps: String = row.try_get(7)?;
                let entry = AuditEntry {
                    id: row.try_get(0)?,
                    at: row.try_get(1)?,
                    actor: row.try_get(2)?,
                    action: row.try_get(3)?,
                    subject: row.try_get(4)?,
                    before: json(5)?,
                    after: json(6)?,
                    apps: serde_json::from_str(&apps).unwrap_or_default(),
                };
                before = entry.id;
                if visible(&entry) {
                    entries.push(entry);
                    if entries.len() >= limit {
                        return Ok(entries);
                    }
                }
            }
            if rows.len() < 500 {
                break;
            }
        }
        Ok(entries)
    }
}

/// `path` with every byte but letters, digits, `-._~/` percent-encoded, so `?`, `#` or
/// `%` in a directory name stay part of the path in a `sqlite://` URL.
fn url_path(path: &str) -> String {
    path.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn body(policy: &Policy) -> String {
    serde_json::to_string(policy).unwrap_or_default()
}

/// A policy row, its body parsed and validated by the one policy parser.
fn stored(row: &AnyRow) -> Result<Stored, StoreError> {
    let name: String = row.try_get(0)?;
    let text: String = row.try_get(1)?;
    let policy: Policy = serde_json::from_str(&text)
        .map_err(|e| StoreError(format!("policy {name:?} in the store: {e}")))?;
    policy
        .build(Style::File)
        .map_err(|p| StoreError(format!("policy {name:?} in the store: {p}")))?;
    Ok(Stored {
        name,
        policy,
        version: row.try_get(2)?,
        created_by: row.try_get(3)?,
        updated_by: row.try_get(4)?,
        created_at: row.try_get(5)?,
        updated_at: row.try_get(6)?,
        file: None,
    })
}

#[cfg(test)]
mod tests {
    use sluicegate_policy::{Kind, Policy, PolicyDuration, STORED_FIELDS};

    #[test]
    fn a_stored_policy_shows_every_metadata_field() {
        let hour = Some(PolicyDuration(3_600_000_000));
        let policy = Policy::from_flags(Kind::FixedWindow, Some(1), None, None, hour);
        let json = super::Stored::from_file("p", "a.toml", &policy).to_json();
        for field in STORED_FIELDS {
            assert!(json.get(field).is_some(), "{field} missing from {json}");
        }
    }
}
