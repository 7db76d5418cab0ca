//! Apps and users: listed, created, given roles, given new tokens, deleted. Everything
//! but listing one's own apps is for admins.

use std::collections::BTreeMap;

use crate::store::{Role, Snapshot, User};
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

fn check_roles(roles: &BTreeMap<String, Role>) -> Result<()> {
    for app in roles.keys() {
        check_name(app, "roles")?;
    }
    Ok(())
}

/// Refuses to remove the last admin (`name` losing the flag or deleted): nobody could
/// manage users and apps any more.
fn keep_an_admin(snapshot: &Snapshot, name: &str) -> Result<()> {
    let others = snapshot.users.values().any(|u| u.admin && u.name != name);
    let is_admin = snapshot.users.get(name).is_some_and(|u| u.admin);
    if is_admin && !others {
        return Err(ServiceError::Conflict(format!(
            "{name:?} is the last admin; make another admin first"
        )));
    }
    Ok(())
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

    /// Creates app `name`; its token, shown once.
    pub(crate) async fn create_app(&self, _: &Admin, name: &str) -> Result<String> {
        check_name(name, "name")?;
        let token = token::new(token::APP);
        if !self.store.create_app(name, &token::hash(&token)).await? {
            return Err(ServiceError::Conflict(format!("app {name:?} exists")));
        }
        self.reload(false).await?;
        Ok(token)
    }

    /// Gives `name` a new token (the old one stops working); shown once.
    pub(crate) async fn rotate(&self, _: &Admin, holder: Holder, name: &str) -> Result<String> {
        let (prefix, what) = match holder {
            Holder::App => (token::APP, "app"),
            Holder::User => (token::USER, "user"),
        };
        let token = token::new(prefix);
        let hash = token::hash(&token);
        let found = match holder {
            Holder::App => self.store.set_app_token(name, &hash).await?,
            Holder::User => self.store.set_user_token(name, &hash).await?,
        };
        if !found {
            return Err(ServiceError::NotFound(what));
        }
        self.reload(false).await?;
        Ok(token)
    }

    /// Deletes app `name`.
    pub(crate) async fn delete_app(&self, _: &Admin, name: &str) -> Result<()> {
        if !self.store.delete_app(name).await? {
            return Err(ServiceError::NotFound("app"));
        }
        Ok(self.reload(false).await?)
    }

    /// Every user.
    pub(crate) fn users(&self, _: &Admin) -> Vec<User> {
        self.snapshot().users.values().cloned().collect()
    }

    /// Creates `user`; its token, shown once.
    pub(crate) async fn create_user(&self, _: &Admin, user: &User) -> Result<String> {
        check_name(&user.name, "name")?;
        check_roles(&user.roles)?;
        let token = token::new(token::USER);
        if !self.store.create_user(user, &token::hash(&token)).await? {
            return Err(ServiceError::Conflict(format!(
                "user {:?} exists",
                user.name
            )));
        }
        self.reload(false).await?;
        Ok(token)
    }

    /// Sets `user`'s admin flag and roles (the last admin stays one).
    pub(crate) async fn set_roles(&self, _: &Admin, user: &User) -> Result<()> {
        check_roles(&user.roles)?;
        if !user.admin {
            keep_an_admin(&self.snapshot(), &user.name)?;
        }
        if !self.store.set_roles(user).await? {
            return Err(ServiceError::NotFound("user"));
        }
        Ok(self.reload(false).await?)
    }

    /// Deletes user `name` (not the last admin).
    pub(crate) async fn delete_user(&self, _: &Admin, name: &str) -> Result<()> {
        keep_an_admin(&self.snapshot(), name)?;
        if !self.store.delete_user(name).await? {
            return Err(ServiceError::NotFound("user"));
        }
        Ok(self.reload(false).await?)
    }
}
