//! Apps and users: each change in one transaction with the facts its checks read (read
//! in that transaction, so two requests, or two servers on one PostgreSQL, cannot both
//! pass a check that only one of them may).

use std::collections::{BTreeMap, BTreeSet};

use sqlx::Row;

use serde_json::{json, Value};

use super::{body, stored, Entry, Store, Stored, Tx, User, WriteError};

/// A change to apps or users (hashes, never tokens).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Account<'a> {
    /// A new app.
    CreateApp {
        /// Its name.
        name: &'a str,
        /// Its token's hash.
        hash: &'a str,
    },
    /// A new token for an app.
    AppToken {
        /// The app.
        name: &'a str,
        /// The new token's hash.
        hash: &'a str,
    },
    /// An app deleted; with `cascade`, it first leaves every policy's `apps` and every
    /// user's roles (the policies otherwise kept as they are).
    DeleteApp {
        /// The app.
        name: &'a str,
        /// Detach it from policies and roles first.
        cascade: bool,
    },
    /// A new user.
    CreateUser {
        /// The user.
        user: &'a User,
        /// Its token's hash.
        hash: &'a str,
    },
    /// A user's admin flag and roles.
    Roles {
        /// The user as it becomes.
        user: &'a User,
    },
    /// A new token for a user.
    UserToken {
        /// The user.
        name: &'a str,
        /// The new token's hash.
        hash: &'a str,
    },
    /// A user deleted.
    DeleteUser {
        /// The user.
        name: &'a str,
    },
}

/// What exists, read inside a change's transaction, for its checks.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    /// Every app.
    pub apps: BTreeSet<String>,
    /// Every user whose roles can be read.
    pub users: BTreeMap<String, User>,
    /// For an app's deletion, the policies that list it (else empty).
    pub policies: Vec<Stored>,
}

impl Facts {
    /// The users with a role in `app`.
    pub(crate) fn users_of(&self, app: &str) -> Vec<&str> {
        self.users
            .values()
            .filter(|u| u.roles.contains_key(app))
            .map(|u| u.name.as_str())
            .collect()
    }
}

/// A new user (text parameters: name, token hash, admin flag, roles).
const INSERT_USER: &str = "INSERT INTO sluicegate_users (name, token_hash, admin, roles) VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING";

/// The admin flag (`"0"`/`"1"`: text, so every parameter binds as text) and roles
/// (JSON) as stored.
fn user_columns(user: &User) -> (&'static str, String) {
    (
        if user.admin { "1" } else { "0" },
        serde_json::to_string(&user.roles).unwrap_or_else(|_| "{}".into()),
    )
}

/// Runs `sql` with text `params` in `tx`; the rows it touched.
async fn run(tx: &mut Tx, sql: &str, params: &[&str]) -> Result<u64, sqlx::Error> {
    let mut query = sqlx::query(sql);
    for param in params {
        query = query.bind(*param);
    }
    Ok(query.execute(&mut **tx).await?.rows_affected())
}

/// The apps and users as of `tx`, and the policies listing the app `deleted`.
async fn facts(tx: &mut Tx, deleted: Option<&str>) -> Result<Facts, sqlx::Error> {
    let mut facts = Facts::default();
    for row in sqlx::query("SELECT name FROM sluicegate_apps")
        .fetch_all(&mut **tx)
        .await?
    {
        facts.apps.insert(row.try_get(0)?);
    }
    for row in sqlx::query("SELECT name, admin, roles FROM sluicegate_users")
        .fetch_all(&mut **tx)
        .await?
    {
        let name: String = row.try_get(0)?;
        let admin: String = row.try_get(1)?;
        let roles: String = row.try_get(2)?;
        let roles = serde_json::from_str(&roles).unwrap_or_default();
        let admin = admin != "0";
        facts
            .users
            .insert(name.clone(), User { name, admin, roles });
    }
    if let Some(app) = deleted {
        for row in sqlx::query("SELECT name, body, version, created_by, updated_by, created_at, updated_at FROM sluicegate_policies")
            .fetch_all(&mut **tx)
            .await?
        {
            // A policy this server cannot read cannot name the app for it either.
            if let Ok(policy) = stored(&row) {
                if policy.policy.apps.iter().any(|a| a == app) {
                    facts.policies.push(policy);
                }
            }
        }
    }
    Ok(facts)
}

impl Store {
    /// Makes `change` by `actor` at `now` after `check` approved the facts read in its
    /// transaction; false (nothing changed) if the name it creates is taken or the one
    /// it changes does not exist.
    pub(crate) async fn write_account<E>(
        &self,
        change: Account<'_>,
        actor: &str,
        now: i64,
        check: impl FnOnce(&Facts) -> Result<(), E>,
    ) -> Result<bool, WriteError<E>> {
        let (mut tx, id) = self.begin().await?;
        let deleted = match change {
            Account::DeleteApp { name, .. } => Some(name),
            _ => None,
        };
        let facts = facts(&mut tx, deleted).await?;
        check(&facts).map_err(WriteError::Refused)?;
        let touched = match change {
            Account::CreateApp { name, hash } => {
                run(&mut tx, "INSERT INTO sluicegate_apps (name, token_hash) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", &[name, hash]).await?
            }
            Account::AppToken { name, hash } => {
                run(&mut tx, "UPDATE sluicegate_apps SET token_hash = $1 WHERE name = $2", &[hash, name]).await?
            }
            Account::DeleteApp { name, cascade } => {
                if cascade {
                    detach(&mut tx, name, &facts, actor, now).await?;
                }
                run(&mut tx, "DELETE FROM sluicegate_apps WHERE name = $1", &[name]).await?
            }
            Account::CreateUser { user, hash } => {
                let (admin, roles) = user_columns(user);
                run(&mut tx, INSERT_USER, &[&user.name, hash, admin, &roles]).await?
            }
            Account::Roles { user } => {
                let (admin, roles) = user_columns(user);
                run(&mut tx, "UPDATE sluicegate_users SET admin = $1, roles = $2 WHERE name = $3", &[admin, &roles, &user.name]).await?
            }
            Account::UserToken { name, hash } => {
                run(&mut tx, "UPDATE sluicegate_users SET token_hash = $1 WHERE name = $2", &[hash, name]).await?
            }
            Account::DeleteUser { name } => {
                run(&mut tx, "DELETE FROM sluicegate_users WHERE name = $1", &[name]).await?
            }
        };
        if touched == 0 {
            // Nothing changed: the counter need not move.
            tx.rollback().await?;
            return Ok(false);
        }
        let (action, subject, before, after) = described(change, &facts);
        let entry = Entry {
            id,
            at: now,
            actor,
            action,
            subject,
            before,
            after,
            // Apps and users are managed by admins: their entries are for admins.
            apps: &[],
        };
        entry.append(&mut tx).await?;
        tx.commit().await?;
        Ok(true)
    }
}

/// A user as the audit log shows it (never its token's hash).
fn user_json(user: &User) -> Value {
    json!({"name": user.name, "admin": user.admin, "roles": user.roles})
}

/// A change's audit action, subject, and the state before and after where they mean
/// something (a rotation shows neither: tokens and hashes are never logged; an app's
/// deletion shows what named it, which a cascade took it out of).
fn described<'a>(
    change: Account<'a>,
    facts: &Facts,
) -> (&'static str, &'a str, Option<Value>, Option<Value>) {
    let user_before = |name: &str| facts.users.get(name).map(user_json);
    match change {
        Account::CreateApp { name, .. } => ("app.create", name, None, Some(json!({"name": name}))),
        Account::AppToken { name, .. } => ("app.rotate", name, None, None),
        Account::DeleteApp { name, .. } => {
            let policies: Vec<&str> = facts.policies.iter().map(|s| s.name.as_str()).collect();
            let before = json!({"name": name, "policies": policies, "users": facts.users_of(name)});
            ("app.delete", name, Some(before), None)
        }
        Account::CreateUser { user, .. } => {
            ("user.create", &user.name, None, Some(user_json(user)))
        }
        Account::Roles { user } => (
            "user.roles",
            &user.name,
            user_before(&user.name),
            Some(user_json(user)),
        ),
        Account::UserToken { name, .. } => ("user.rotate", name, None, None),
        Account::DeleteUser { name } => ("user.delete", name, user_before(name), None),
    }
}

/// Takes app `name` out of the policies and roles naming it (each policy a new version).
async fn detach(
    tx: &mut Tx,
    name: &str,
    facts: &Facts,
    actor: &str,
    now: i64,
) -> Result<(), sqlx::Error> {
    for stored in &facts.policies {
        let mut policy = stored.policy.clone();
        policy.apps.retain(|a| a != name);
        sqlx::query("UPDATE sluicegate_policies SET body = $1, version = $2, updated_by = $3, updated_at = $4 WHERE name = $5")
            .bind(body(&policy))
            .bind(stored.version + 1)
            .bind(actor)
            .bind(now)
            .bind(&stored.name)
            .execute(&mut **tx)
            .await?;
    }
    for user in facts.users.values().filter(|u| u.roles.contains_key(name)) {
        let mut user = user.clone();
        user.roles.remove(name);
        let (_, roles) = user_columns(&user);
        run(
            tx,
            "UPDATE sluicegate_users SET roles = $1 WHERE name = $2",
            &[&roles, &user.name],
        )
        .await?;
    }
    Ok(())
}
