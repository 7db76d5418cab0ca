//! Apps and users: listed, created, given roles, given new tokens, deleted. Everything
//! but listing one's own apps is for admins.

use std::collections::BTreeMap;

use crate::store::{Account, Facts, Role, User};
use crate::time::now_s;
use crate::token;

use super::auth::{role, Admin};
use super::error::{Result, ServiceError};
use super::names::check_name;
use super::state::Service;

/// What holds a token: an app or a user.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Holder {
    /// An app.
    App,
    /// A user.
    User,
}

/// Role names are app names, of apps that exist (a role on no app would be handed to
/// an app created later under that name).
fn check_roles(facts: &Facts, roles: &BTreeMap<String, Role>) -> Result<()> {
    for app in roles.keys() {
        check_name(app, "roles")?;
    }
    let unknown: Vec<&String> = roles.keys().filter(|a| !facts.apps.contains(*a)).collect();
    if !unknown.is_empty() {
        return Err(ServiceError::invalid(
            format!("roles name apps that do not exist: {unknown:?}"),
            Some("roles"),
        ));
    }
    Ok(())
}

/// Refuses to remove the last admin (`name` losing the flag or deleted): nobody could
/// manage users and apps any more. Read in the change's transaction.
fn keep_an_admin(facts: &Facts, name: &str) -> Result<()> {
    let others = facts.users.values().any(|u| u.admin && u.name != name);
    let is_admin = facts.users.get(name).is_some_and(|u| u.admin);
    if is_admin && !others {
        return Err(ServiceError::Conflict(format!(
            "{name:?} is the last admin; make another admin first"
        )));
    }
    Ok(())
}

/// Refuses to delete an app still named by policies or roles, unless `cascade`.
fn unused(facts: &Facts, name: &str, cascade: bool) -> Result<()> {
    if !facts.apps.contains(name) {
        return Err(ServiceError::NotFound("app"));
    }
    let policies: Vec<&str> = facts.policies.iter().map(|s| s.name.as_str()).collect();
    let users = facts.users_of(name);
    if cascade || (policies.is_empty() && users.is_empty()) {
        return Ok(());
    }
    Err(ServiceError::Conflict(format!(
        "app {name:?} is still named by policies {policies:?} and roles of users {users:?}: \
         change them first, or delete with ?cascade=true to take the app out of them"
    )))
}

impl Service {
    /// The apps `user` has a role in, with the role (`None`: an admin, who has every
    /// role in every app).
    pub(crate) fn apps(&self, user: &User) -> Vec<(String, Option<Role>)> {
        self.snapshot()
            .apps
            .iter()
            .filter_map(|app| {
                if user.admin {
                    Some((app.clone(), None))
                } else {
                    role(user, app).map(|r| (app.clone(), Some(r)))
                }
            })
            .collect()
    }

    /// Makes `change` once `check` approved the facts read in its transaction, then
    /// reloads; false if it changed nothing (a name taken, or none to change).
    async fn account(
        &self,
        admin: &Admin,
        change: Account<'_>,
        check: impl FnOnce(&Facts) -> Result<()>,
    ) -> Result<bool> {
        let done = self
            .store
            .write_account(change, admin.name(), now_s(), check)
            .await?;
        if done {
            self.reload(false).await?;
        }
        Ok(done)
    }

    /// Creates app `name`; its token, shown once.
    pub(crate) async fn create_app(&self, admin: &Admin, name: &str) -> Result<String> {
        check_name(name, "name")?;
        let token = token::new(token::APP);
        let hash = token::hash(&token);
        let change = Account::CreateApp { name, hash: &hash };
        if !self.account(admin, change, |_| Ok(())).await? {
            return Err(ServiceError::Conflict(format!("app {name:?} exists")));
        }
        Ok(token)
    }

    /// Gives `name` a new token (the old one stops working); shown once.
    pub(crate) async fn rotate(&self, admin: &Admin, holder: Holder, name: &str) -> Result<String> {
        let (prefix, what) = match holder {
            Holder::App => (token::APP, "app"),
            Holder::User => (token::USER, "user"),
        };
        let token = token::new(prefix);
        let hash = token::hash(&token);
        let change = match holder {
            Holder::App => Account::AppToken { name, hash: &hash },
            Holder::User => Account::UserToken { name, hash: &hash },
        };
        if !self.account(admin, change, |_| Ok(())).await? {
            return Err(ServiceError::NotFound(what));
        }
        Ok(token)
    }

    /// Deletes app `name`: refused while policies or roles name it, unless `cascade`
    /// (which takes it out of them).
    pub(crate) async fn delete_app(&self, admin: &Admin, name: &str, cascade: bool) -> Result<()> {
        let change = Account::DeleteApp { name, cascade };
        let check = |facts: &Facts| unused(facts, name, cascade);
        if !self.account(admin, change, check).await? {
            return Err(ServiceError::NotFound("app"));
        }
        Ok(())
    }

    /// Every user.
    pub(crate) fn users(&self, _: &Admin) -> Vec<User> {
        self.snapshot().users.values().cloned().collect()
    }

    /// Creates `user`; its token, shown once.
    pub(crate) async fn create_user(&self, admin: &Admin, user: &User) -> Result<String> {
        check_name(&user.name, "name")?;
        let token = token::new(token::USER);
        let hash = token::hash(&token);
        let change = Account::CreateUser { user, hash: &hash };
        let check = |facts: &Facts| check_roles(facts, &user.roles);
        if !self.account(admin, change, check).await? {
            return Err(ServiceError::Conflict(format!(
                "user {:?} exists",
                user.name
            )));
        }
        Ok(token)
    }

    /// Sets `user`'s admin flag and roles (the last admin stays one).
    pub(crate) async fn set_roles(&self, admin: &Admin, user: &User) -> Result<()> {
        let check = |facts: &Facts| {
            check_roles(facts, &user.roles)?;
            if user.admin {
                Ok(())
            } else {
                keep_an_admin(facts, &user.name)
            }
        };
        if !self.account(admin, Account::Roles { user }, check).await? {
            return Err(ServiceError::NotFound("user"));
        }
        Ok(())
    }

    /// Deletes user `name` (not the last admin).
    pub(crate) async fn delete_user(&self, admin: &Admin, name: &str) -> Result<()> {
        let check = |facts: &Facts| keep_an_admin(facts, name);
        if !self
            .account(admin, Account::DeleteUser { name }, check)
            .await?
        {
            return Err(ServiceError::NotFound("user"));
        }
        Ok(())
    }
}
