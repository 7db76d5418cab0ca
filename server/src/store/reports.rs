//! Reports' ids: a report (and a decision's estimate it settles) is applied once per id,
//! also across servers on one PostgreSQL. The row is claimed with one conditional
//! statement before the report is applied, so two servers racing on an id cannot both
//! win; rows older than the retention are pruned. A row keeps the id and key as their
//! digests, so its size does not grow with theirs and the cap on ids bounds bytes too.

use sqlx::Row;

use super::{Store, StoreError};

/// How an id's report stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// This call claimed the id: report the cost minus the `estimate` already decided
    /// (0 without a decision).
    Won {
        /// Units the decision with this id admitted.
        estimate: u64,
    },
    /// The id was reported before: what that report recorded and dropped (`None` while
    /// it is being applied).
    Seen {
        /// Units recorded.
        recorded: Option<u64>,
        /// Units dropped.
        dropped: Option<u64>,
    },
    /// The id belongs to another policy or key.
    Elsewhere,
    /// The id was reported with another cost: the stored one.
    OtherCost(u64),
    /// The app holds as many ids as it may: the id is new and refused.
    Full,
}

/// How a decision's estimate was remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Remembered {
    /// Under its new id.
    New,
    /// Not: the id was used already.
    Used,
    /// Not: the app holds as many ids as it may.
    Full,
}

/// Where an id's report is: the app that sent it, the id, the policy and key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReportId<'a> {
    /// The app (ids are the app's own).
    pub app: &'a str,
    /// The caller's id.
    pub id: &'a str,
    /// The policy.
    pub policy: &'a str,
    /// The key.
    pub key: &'a str,
}

/// What a row keeps of an id or key: its SHA-256 in hex, 64 bytes whatever its length.
fn kept(text: &str) -> String {
    crate::token::hash(text)
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn unsigned(n: Option<i64>) -> Option<u64> {
    n.and_then(|n| u64::try_from(n).ok())
}

impl Store {
    /// Records a decision's `estimate` under its id, at `now` (seconds), unless the id
    /// was used already or its app holds `max_ids` ids (counted up to that bound only).
    pub(crate) async fn remember_estimate(
        &self,
        at: ReportId<'_>,
        estimate: u64,
        now: i64,
        max_ids: usize,
    ) -> Result<Remembered, StoreError> {
        let id = kept(at.id);
        let done = sqlx::query("INSERT INTO sluicegate_reports (app, id, created_at, policy, rate_key, estimate) SELECT $1, $2, $3, $4, $5, $6 WHERE (SELECT COUNT(*) FROM (SELECT 1 FROM sluicegate_reports WHERE app = $1 LIMIT $7) AS held) < $7 ON CONFLICT (app, id) DO NOTHING")
            .bind(at.app)
            .bind(&id)
            .bind(now)
            .bind(at.policy)
            .bind(kept(at.key))
            .bind(signed(estimate))
            .bind(i64::try_from(max_ids).unwrap_or(i64::MAX))
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 1 {
            return Ok(Remembered::New);
        }
        let used = sqlx::query("SELECT 1 FROM sluicegate_reports WHERE app = $1 AND id = $2")
            .bind(at.app)
            .bind(&id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(if used.is_some() {
            Remembered::Used
        } else {
            Remembered::Full
        })
    }

    /// Claims the report of `cost` units under its id, at `now` (seconds); a new id only
    /// while its app holds fewer than `max_ids`.
    pub(crate) async fn claim_report(
        &self,
        at: ReportId<'_>,
        cost: u64,
        now: i64,
        max_ids: usize,
    ) -> Result<Claim, StoreError> {
        if self.remember_estimate(at, 0, now, max_ids).await? == Remembered::Full {
            return Ok(Claim::Full);
        }
        let (id, key) = (kept(at.id), kept(at.key));
        // Only one call finds `cost` unset: the row's lock orders racing servers.
        let won = sqlx::query("UPDATE sluicegate_reports SET cost = $3 WHERE app = $1 AND id = $2 AND policy = $4 AND rate_key = $5 AND cost IS NULL")
            .bind(at.app)
            .bind(&id)
            .bind(signed(cost))
            .bind(at.policy)
            .bind(&key)
            .execute(&self.pool)
            .await?
            .rows_affected()
            == 1;
        let row = sqlx::query("SELECT policy, rate_key, estimate, recorded, dropped, cost FROM sluicegate_reports WHERE app = $1 AND id = $2")
            .bind(at.app)
            .bind(&id)
            .fetch_one(&self.pool)
            .await?;
        let (policy, stored_key): (String, String) = (row.try_get(0)?, row.try_get(1)?);
        Ok(if won {
            Claim::Won {
                estimate: unsigned(Some(row.try_get(2)?)).unwrap_or(0),
            }
        } else if policy != at.policy || stored_key != key {
            Claim::Elsewhere
        } else if let Some(stored) = unsigned(row.try_get(5)?).filter(|&stored| stored != cost) {
            Claim::OtherCost(stored)
        } else {
            Claim::Seen {
                recorded: unsigned(row.try_get(3)?),
                dropped: unsigned(row.try_get(4)?),
            }
        })
    }

    /// Gives back the claim of the report under `at`, whose charge failed: its retry
    /// claims it again.
    pub(crate) async fn release_report(&self, at: ReportId<'_>) -> Result<(), StoreError> {
        sqlx::query("UPDATE sluicegate_reports SET cost = NULL WHERE app = $1 AND id = $2 AND recorded IS NULL")
            .bind(at.app)
            .bind(kept(at.id))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Keeps what the claimed report under `at` recorded and dropped, for its retries.
    pub(crate) async fn settle_report(
        &self,
        at: ReportId<'_>,
        recorded: u64,
        dropped: u64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE sluicegate_reports SET recorded = $3, dropped = $4 WHERE app = $1 AND id = $2",
        )
        .bind(at.app)
        .bind(kept(at.id))
        .bind(signed(recorded))
        .bind(signed(dropped))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Forgets the ids recorded before `before` (seconds): their retries count again.
    pub(crate) async fn prune_reports(&self, before: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM sluicegate_reports WHERE created_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::{Claim, Remembered, ReportId};
    use crate::store::Store;
    use sqlx::Row;

    const MAX: usize = 2;

    const AT: ReportId<'static> = ReportId {
        app: "shop",
        id: "r1",
        policy: "tokens",
        key: "alice",
    };

    #[tokio::test]
    async fn an_id_is_claimed_once_settles_its_estimate_and_is_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).await.unwrap();
        let remember = |at, now| store.remember_estimate(at, 5, now, MAX);
        assert_eq!(remember(AT, 100).await.unwrap(), Remembered::New);
        assert_eq!(remember(AT, 100).await.unwrap(), Remembered::Used);
        let other = ReportId { key: "bob", ..AT };
        assert_eq!(
            store.claim_report(other, 9, 101, MAX).await.unwrap(),
            Claim::Elsewhere
        );
        assert_eq!(
            store.claim_report(AT, 9, 101, MAX).await.unwrap(),
            Claim::Won { estimate: 5 }
        );
        let seen = Claim::Seen {
            recorded: None,
            dropped: None,
        };
        assert_eq!(store.claim_report(AT, 9, 101, MAX).await.unwrap(), seen);
        // The same id with another cost is no retry.
        assert_eq!(
            store.claim_report(AT, 7, 101, MAX).await.unwrap(),
            Claim::OtherCost(9)
        );
        store.settle_report(AT, 3, 1).await.unwrap();
        let seen = Claim::Seen {
            recorded: Some(3),
            dropped: Some(1),
        };
        assert_eq!(store.claim_report(AT, 9, 102, MAX).await.unwrap(), seen);
        assert_eq!(store.prune_reports(100).await.unwrap(), 0);
        assert_eq!(store.prune_reports(101).await.unwrap(), 1);
        let fresh = ReportId { id: "r2", ..AT };
        assert_eq!(
            store.claim_report(fresh, 4, 103, MAX).await.unwrap(),
            Claim::Won { estimate: 0 }
        );
        // A claim given back (its charge failed) is won again by the retry.
        store.release_report(fresh).await.unwrap();
        assert_eq!(
            store.claim_report(fresh, 4, 104, MAX).await.unwrap(),
            Claim::Won { estimate: 0 }
        );
    }

    /// A row's text is the same size for a long id and key as for short ones: the cap
    /// on ids bounds the bytes they take.
    #[tokio::test]
    async fn a_row_keeps_digests_whatever_the_id_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).await.unwrap();
        let (id, key) = ("i".repeat(256), "k".repeat(1024));
        let at = ReportId {
            id: &id,
            key: &key,
            ..AT
        };
        assert_eq!(
            store.remember_estimate(at, 1, 100, MAX).await.unwrap(),
            Remembered::New
        );
        assert_eq!(
            store.claim_report(at, 1, 100, MAX).await.unwrap(),
            Claim::Won { estimate: 1 }
        );
        let other = ReportId { key: "short", ..at };
        assert_eq!(
            store.claim_report(other, 1, 100, MAX).await.unwrap(),
            Claim::Elsewhere
        );
        let row = sqlx::query("SELECT LENGTH(id), LENGTH(rate_key) FROM sluicegate_reports")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        let lengths: (i64, i64) = (row.get(0), row.get(1));
        assert_eq!(lengths, (64, 64));
    }

    #[tokio::test]
    async fn an_app_holds_a_bounded_number_of_ids() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).await.unwrap();
        for id in ["a", "b"] {
            let at = ReportId { id, ..AT };
            assert_eq!(
                store.claim_report(at, 1, 100, MAX).await.unwrap(),
                Claim::Won { estimate: 0 }
            );
        }
        let third = ReportId { id: "c", ..AT };
        assert_eq!(
            store.claim_report(third, 1, 100, MAX).await.unwrap(),
            Claim::Full
        );
        let estimated = store.remember_estimate(third, 1, 100, MAX).await.unwrap();
        assert_eq!(estimated, Remembered::Full);
        // Another app's ids are its own; a known id is still seen.
        let other_app = ReportId {
            app: "blog",
            ..third
        };
        assert_eq!(
            store.claim_report(other_app, 1, 100, MAX).await.unwrap(),
            Claim::Won { estimate: 0 }
        );
        let known = ReportId { id: "a", ..AT };
        assert!(matches!(
            store.claim_report(known, 1, 100, MAX).await.unwrap(),
            Claim::Seen { .. }
        ));
        // Pruned, the app may hold new ones.
        store.prune_reports(101).await.unwrap();
        assert_eq!(
            store.claim_report(third, 1, 102, MAX).await.unwrap(),
            Claim::Won { estimate: 0 }
        );
    }
}
