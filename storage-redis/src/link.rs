//! Where calls meet a connection. Every operation is written once, as an `async fn` over
//! a [`Link`] that sends one command and returns its reply; the synchronous methods run
//! it over a [`Blocking`] link, whose sends are done before they return (so [`block`]
//! ends it in one poll), the asynchronous ones await it over an [`Awaiting`] link.

use std::future::{self, Future};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use redis::{aio, Cmd, ConnectionLike, FromRedisValue, RedisResult, Value};

/// A connection seen one command at a time.
pub(crate) trait Link {
    /// Sends `cmd` and reads its reply, an error reply as an error (as `Cmd::query`).
    fn send(&mut self, cmd: &Cmd) -> impl Future<Output = RedisResult<Value>>;
}

/// A synchronous connection: each send is complete when it returns.
pub(crate) struct Blocking<'a, C>(pub(crate) &'a mut C);

impl<C: ConnectionLike> Link for Blocking<'_, C> {
    fn send(&mut self, cmd: &Cmd) -> impl Future<Output = RedisResult<Value>> {
        future::ready(cmd.query(self.0))
    }
}

/// An asynchronous connection: a multiplexed one, a connection manager, a cluster's.
pub(crate) struct Awaiting<'a, C>(pub(crate) &'a mut C);

impl<C: aio::ConnectionLike> Link for Awaiting<'_, C> {
    fn send(&mut self, cmd: &Cmd) -> impl Future<Output = RedisResult<Value>> {
        cmd.query_async(&mut *self.0)
    }
}

/// A reply read as `T`, as `Cmd::query::<T>` reads it.
pub(crate) fn typed<T: FromRedisValue>(reply: RedisResult<Value>) -> RedisResult<T> {
    Ok(redis::from_redis_value(reply?)?)
}

/// Runs `future` to its end on this thread. An operation over a [`Blocking`] link never
/// waits, so it ends on the first poll; the thread parks only for a future that does.
pub(crate) fn block<F: Future>(future: F) -> F::Output {
    struct Unpark(Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        thread::park();
    }
}
