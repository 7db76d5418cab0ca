//! The hosts of the lock family the commands use: Redis (`RedisRwLock`, whose waiter
//! sleeps in `BLPOP` until a call makes its turn) and etcd (`EtcdRwLock`, whose waiter
//! watches its predecessor's key), behind one interface.

use std::time::Duration;

use sluicegate_core::rwlock::{LockMode, RwAcquired, RwLease, RwState};
use sluicegate_core::{Grant, LeaseRequest, Ticks};

use crate::backend::Open;
use crate::failure::Failure;

/// What a holder does to its lease.
#[derive(Debug, Clone, Copy)]
pub enum Change {
    Release,
    Renew,
}

/// How long an acquire waits in line: `None` for a try.
pub type Wait = Option<Duration>;
/// An acquire's answer.
pub type Asked = Result<RwAcquired, Failure>;

/// A host of the lock family for one command.
pub trait Family {
    /// A lease in `mode`, waiting up to `wait` in line; without one, a try.
    fn acquire(&mut self, r: &LeaseRequest<'_>, mode: LockMode, wait: Wait) -> Asked;
    fn change(&mut self, request: &LeaseRequest<'_>, change: Change) -> Result<Grant, Failure>;
    /// The key's holders and queue, `None` when fresh.
    fn state(&mut self, key: &str) -> Result<Option<RwState>, Failure>;
    /// The clock the state's expiries are on.
    fn now(&mut self) -> Result<Ticks, Failure>;
    /// The lock's parameters.
    fn lease(&self) -> RwLease;
    /// Where the key's state is stored, for `inspect`.
    fn stored(&self, namespace: &str, key: &str) -> String;
}

impl Open {
    /// The lock family on this backend (Redis or etcd; `None` elsewhere): `lease` on
    /// Redis, whose waiters' places last `place_ttl` and whose connection may block
    /// `blocking` beyond the usual timeout (a waiter's `BLPOP`); on etcd always fair.
    pub fn family(
        &self,
        lease: RwLease,
        place_ttl: Ticks,
        blocking: Duration,
    ) -> Result<Option<Box<dyn Family>>, Failure> {
        let _ = (lease, place_ttl, blocking);
        Ok(match &self.backend {
            #[cfg(feature = "redis")]
            crate::backend::Backend::Redis(_) => self
                .rw_lock(lease, place_ttl, blocking)
                .map(|(lock, con)| Box::new(redis::OnRedis { lock, con }) as Box<dyn Family>),
            #[cfg(feature = "etcd")]
            crate::backend::Backend::Etcd(endpoints) => {
                Some(Box::new(etcd::OnEtcd::connect(endpoints, &self.namespace)?))
            }
            _ => None,
        })
    }
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use sluicegate_redis::{HeldChange, Reconnecting, RedisRwLock};

    pub(super) struct OnRedis {
        pub(super) lock: RedisRwLock,
        pub(super) con: Reconnecting,
    }

    impl Family for OnRedis {
        fn acquire(
            &mut self,
            request: &LeaseRequest<'_>,
            mode: LockMode,
            wait: Option<Duration>,
        ) -> Result<RwAcquired, Failure> {
            Ok(match wait {
                Some(wait) => {
                    (self.lock).acquire_blocking(&mut self.con, request, mode, wait, None)?
                }
                None => {
                    self.lock
                        .acquire(&mut self.con, request, mode, None)?
                        .answer
                }
            })
        }

        fn change(&mut self, request: &LeaseRequest<'_>, change: Change) -> Result<Grant, Failure> {
            let change = match change {
                Change::Release => HeldChange::Release,
                Change::Renew => HeldChange::Renew,
            };
            Ok(self.lock.change(&mut self.con, request, change)?.answer)
        }

        fn state(&mut self, key: &str) -> Result<Option<RwState>, Failure> {
            Ok(self.lock.state(&mut self.con, key.as_bytes())?)
        }

        fn now(&mut self) -> Result<Ticks, Failure> {
            let (seconds, micros): (u64, u64) = ::redis::cmd("TIME")
                .query(&mut self.con)
                .map_err(sluicegate_redis::Error::Redis)?;
            Ok(seconds.saturating_mul(1_000_000).saturating_add(micros))
        }

        fn lease(&self) -> RwLease {
            *self.lock.lease()
        }

        fn stored(&self, namespace: &str, key: &str) -> String {
            format!("{namespace}{key}")
        }
    }
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use sluicegate_core::{Clock, MonotonicClock};
    use sluicegate_etcd::EtcdRwLock;

    /// The client is asynchronous: each call runs on a runtime of the command's own.
    pub(super) struct OnEtcd {
        lock: EtcdRwLock,
        runtime: tokio::runtime::Runtime,
    }

    impl OnEtcd {
        pub(super) fn connect(endpoints: &[String], namespace: &str) -> Result<Self, Failure> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Failure::Backend(format!("cannot start a runtime: {e}")))?;
            let lock = runtime.block_on(EtcdRwLock::connect(endpoints))?;
            Ok(Self {
                lock: lock.with_prefix(namespace.as_bytes()),
                runtime,
            })
        }
    }

    impl Family for OnEtcd {
        /// A waiter watches its predecessor's key; no polling.
        fn acquire(&mut self, r: &LeaseRequest<'_>, mode: LockMode, wait: Wait) -> Asked {
            let lock = &self.lock;
            Ok(match wait {
                Some(wait) => (self.runtime).block_on(lock.acquire(r, mode, wait))?,
                None => self.runtime.block_on(lock.try_acquire(r, mode))?,
            })
        }

        fn change(&mut self, request: &LeaseRequest<'_>, change: Change) -> Result<Grant, Failure> {
            let lock = &self.lock;
            Ok(match change {
                Change::Release => self.runtime.block_on(lock.release(request))?,
                Change::Renew => self.runtime.block_on(lock.renew(request))?,
            })
        }

        fn state(&mut self, key: &str) -> Result<Option<RwState>, Failure> {
            Ok(self.runtime.block_on(self.lock.state(key.as_bytes()))?)
        }

        /// Expiries are this machine's clock plus the time etcd says a lease has left.
        fn now(&mut self) -> Result<Ticks, Failure> {
            Ok(MonotonicClock::new().now())
        }

        fn lease(&self) -> RwLease {
            self.lock.lease()
        }

        fn stored(&self, namespace: &str, key: &str) -> String {
            format!("{namespace}{key}/rw/")
        }
    }
}
