//! How a call reaches the server: the native module's commands, the function library
//! (`FCALL`, Redis ≥ 7) or a script (`EVALSHA`), chosen by the caller or detected on
//! first use.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use std::borrow::Cow;

use redis::{Cmd, RedisError, RedisResult, RedisWrite, Value};

use crate::link::Link;
use crate::lua::LIBRARY;

/// The way calls reach the server, fastest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Route {
    /// The native module's commands (`sluicegate-redis-module`: `SLUICEGATE.CHECK`), for
    /// decisions (checks, reservations, batches); reads of the state, resets and purges
    /// still take the library or a script, as the module offers no raw read. Detected
    /// once per limiter with `COMMAND INFO`; chosen on a server without the module,
    /// calls fail with the server's `unknown command`.
    Module,
    /// `FCALL` into the function library (Redis ≥ 7), loaded with `FUNCTION LOAD` the
    /// first time a server answers that the function does not exist. The library's code
    /// is compiled and its helpers defined once, at load.
    Functions,
    /// `EVALSHA` of a script holding the algorithm's code (sent with `EVAL` when the
    /// server answers `NOSCRIPT`): any Redis with Lua, and servers that refuse
    /// `FUNCTION` (some managed services).
    Scripts,
}

const UNKNOWN: u8 = 0;
const FUNCTIONS: u8 = 1;
const SCRIPTS: u8 = 2;
/// The module's state in [`Program::module`]: loaded or not (`UNKNOWN` until asked).
const LOADED: u8 = 1;
const ABSENT: u8 = 2;

/// What to do after an error reply.
enum Retry {
    /// `NOSCRIPT`: send the script's text.
    Eval,
    /// The function does not exist: load the library.
    Load,
    /// The server has no `FCALL`: use scripts from now on.
    Fallback,
}

/// Where a call stands on its way to the server: the route and form of its next send,
/// and how many sends failed.
struct Attempt {
    route: Route,
    /// Whether the next send carries the script's text (`EVAL`).
    eval: bool,
    failed: u8,
}

/// What follows a reply to a call's send.
enum Next {
    /// The call's result.
    Reply(RedisResult<Value>),
    /// Send again, as the attempt now says.
    Send,
    /// Load the library (`FUNCTION LOAD`), then send again.
    Load,
}

/// One call: the function's suffix in the library, whether it only reads, and the
/// command for the route in use when it was made (its name, the count of keys, the keys
/// and the arguments). Built once per call; a retry on another route copies its
/// arguments behind another name.
pub(crate) struct Invocation {
    function: &'static str,
    read_only: bool,
    route: Route,
    /// The command; callers append the arguments after the keys.
    pub(crate) cmd: Cmd,
    /// The module's command for the same call, when the module may be in use and the
    /// call has one; callers fill it.
    pub(crate) module: Option<Cmd>,
}

/// A script and its place in the function library, with the route calls take.
#[derive(Debug)]
pub(crate) struct Program {
    source: String,
    sha1: String,
    /// The route chosen by the caller, if any.
    forced: Option<Route>,
    /// The library's or scripts' route detected (`UNKNOWN` until the first call), when
    /// neither was chosen.
    detected: AtomicU8,
    /// Whether the module is loaded (`UNKNOWN` until the first decision asks).
    module: AtomicU8,
    /// Whether a server refused a batch of decisions in one command (a cluster, where
    /// its keys span slots): batches go as pipelines from then on.
    batches_refused: AtomicBool,
}

impl Clone for Program {
    fn clone(&self) -> Self {
        Self {
            source: self.source.clone(),
            sha1: self.sha1.clone(),
            forced: self.forced,
            detected: AtomicU8::new(self.detected.load(Ordering::Relaxed)),
            module: AtomicU8::new(self.module.load(Ordering::Relaxed)),
            batches_refused: AtomicBool::new(self.batches_refused.load(Ordering::Relaxed)),
        }
    }
}

impl Program {
    pub(crate) fn new(source: String) -> Self {
        Self {
            sha1: redis::Script::new(&source).get_hash().to_owned(),
            source,
            forced: None,
            detected: AtomicU8::new(UNKNOWN),
            module: AtomicU8::new(UNKNOWN),
            batches_refused: AtomicBool::new(false),
        }
    }

    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// Forces `route` (`None`: detect it). Forcing the module still detects the route of
    /// the calls the module has no command for.
    pub(crate) fn force(&mut self, route: Option<Route>) {
        self.forced = route;
        let module = match route {
            None => UNKNOWN,
            Some(Route::Module) => LOADED,
            Some(_) => ABSENT,
        };
        self.module = AtomicU8::new(module);
    }

    /// The route decisions take: the chosen one, else the one detected; `None` before the
    /// first call detects it.
    pub(crate) fn route(&self) -> Option<Route> {
        if self.module.load(Ordering::Relaxed) == LOADED {
            return Some(Route::Module);
        }
        self.lua_route()
    }

    /// The library's or the scripts' route, chosen or detected.
    pub(crate) fn lua_route(&self) -> Option<Route> {
        self.forced.filter(|&route| route != Route::Module).or(
            match self.detected.load(Ordering::Relaxed) {
                FUNCTIONS => Some(Route::Functions),
                SCRIPTS => Some(Route::Scripts),
                _ => None,
            },
        )
    }

    /// The route the next call without a module command tries: detection starts with
    /// the library.
    fn next_route(&self) -> Route {
        self.lua_route().unwrap_or(Route::Functions)
    }

    /// Whether calls should carry the module's command: the module is loaded, or not
    /// asked about yet.
    pub(crate) fn may_use_module(&self) -> bool {
        self.module.load(Ordering::Relaxed) != ABSENT
    }

    /// The route on which one command decides a batch: the module's, else the
    /// library's; `None` on scripts, before the route is detected, or once a server
    /// refused a batch.
    pub(crate) fn batch_route(&self) -> Option<Route> {
        if self.batches_refused.load(Ordering::Relaxed) {
            return None;
        }
        self.route().filter(|&route| route != Route::Scripts)
    }

    /// Notes a batch's `error`: a cluster's refusal of keys in several slots stops
    /// batches (other errors leave them: the next batch tries again).
    pub(crate) fn batch_refused(&self, error: &RedisError) {
        if error.code() == Some("CROSSSLOT") {
            self.batches_refused.store(true, Ordering::Relaxed);
        }
    }

    /// Asks the server once whether the module is loaded (`COMMAND INFO sluicegate.check`
    /// names it), unless known; a refused `COMMAND` counts as no module.
    pub(crate) async fn detect<L: Link>(&self, link: &mut L) -> RedisResult<bool> {
        match self.module_known() {
            Some(loaded) => Ok(loaded),
            None => self.detected_module(link.send(&module_info()).await),
        }
    }

    /// Whether the module is loaded, if known.
    fn module_known(&self) -> Option<bool> {
        match self.module.load(Ordering::Relaxed) {
            UNKNOWN => None,
            state => Some(state == LOADED),
        }
    }

    /// Records the answer to `COMMAND INFO`: an array whose entry is not nil.
    fn detected_module(&self, reply: RedisResult<Value>) -> RedisResult<bool> {
        let loaded = match reply {
            Ok(Value::Array(entries)) => entries.first().is_some_and(|e| *e != Value::Nil),
            Ok(_) => false,
            Err(error) if error.code().is_some() => false,
            Err(error) => return Err(error),
        };
        let state = if loaded { LOADED } else { ABSENT };
        self.module.store(state, Ordering::Relaxed);
        Ok(loaded)
    }

    fn settle(&self, route: Route) {
        if self.forced.is_none() {
            let code = if route == Route::Functions {
                FUNCTIONS
            } else {
                SCRIPTS
            };
            self.detected.store(code, Ordering::Relaxed);
        }
    }

    /// A call of `function` on `keys`, on the route in use; its arguments are appended
    /// to its `cmd`.
    pub(crate) fn invocation<K: redis::ToRedisArgs>(
        &self,
        function: &'static str,
        read_only: bool,
        keys: &[K],
    ) -> Invocation {
        let route = self.next_route();
        let mut cmd = self.head(function, read_only, route, false);
        // Room for the keys at once (a batch's many), not grown by doubling.
        cmd.reserve_space_for_args(keys.iter().map(|_| 32));
        cmd.arg(keys.len()).arg(keys);
        Invocation {
            function,
            read_only,
            route,
            cmd,
            module: None,
        }
    }

    /// A call the module's `command` makes alone, the module known to be loaded: no
    /// library call is built (an empty one stands in, never sent).
    pub(crate) fn native(
        &self,
        function: &'static str,
        read_only: bool,
        module: Cmd,
    ) -> Invocation {
        Invocation {
            function,
            read_only,
            route: self.next_route(),
            cmd: Cmd::new(),
            module: Some(module),
        }
    }

    /// The command's name and first argument: the function, or the script.
    fn head(&self, function: &str, read_only: bool, route: Route, eval: bool) -> Cmd {
        match (route, eval) {
            (Route::Functions | Route::Module, _) => {
                // (The module's commands are built by the callers: `next_route` is never
                // the module.)
                let name = if read_only { "FCALL_RO" } else { "FCALL" };
                let mut cmd = redis::cmd(name);
                cmd.arg(LIBRARY.function(function));
                cmd
            }
            (Route::Scripts, eval) => {
                let mut cmd = redis::cmd(if eval { "EVAL" } else { "EVALSHA" });
                cmd.arg(if eval { &self.source } else { &self.sha1 });
                cmd
            }
        }
    }

    /// `call` on `route` (`eval`: with the script's text): its own command when that is
    /// the one, else a copy under another head.
    fn command<'a>(&self, call: &'a Invocation, route: Route, eval: bool) -> Cow<'a, Cmd> {
        if route == call.route && !eval {
            return Cow::Borrowed(&call.cmd);
        }
        let mut cmd = self.head(call.function, call.read_only, route, eval);
        for arg in call.cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        Cow::Owned(cmd)
    }

    fn retry(&self, route: Route, code: Option<&str>, detail: Option<&str>) -> Option<Retry> {
        let detail = detail.unwrap_or_default();
        match (route, code) {
            (Route::Scripts, Some("NOSCRIPT")) => Some(Retry::Eval),
            (Route::Functions, Some("ERR")) if detail.starts_with("Function not found") => {
                Some(Retry::Load)
            }
            (Route::Functions, Some("ERR"))
                if self.forced.is_none() && detail.starts_with("unknown command") =>
            {
                Some(Retry::Fallback)
            }
            _ => None,
        }
    }

    /// Whether a pipelined reply must go again alone (the script or library missing, or
    /// no `FCALL`), on whichever route it was sent: an earlier reply of the same
    /// pipeline may have settled the route since.
    pub(crate) fn must_retry(&self, reply: &Value) -> bool {
        match reply {
            Value::ServerError(e) => [Route::Functions, Route::Scripts]
                .into_iter()
                .any(|route| self.retry(route, Some(e.code()), e.details()).is_some()),
            _ => false,
        }
    }

    /// After a failed `FUNCTION LOAD`: detection falls back to scripts on a server's
    /// refusal (`FUNCTION` renamed away, say); a chosen route reports it.
    fn load_failed(&self, error: RedisError) -> RedisResult<Route> {
        if self.forced.is_none() && error.code().is_some() {
            self.settle(Route::Scripts);
            Ok(Route::Scripts)
        } else {
            Err(error)
        }
    }

    /// Runs `call`, loading the library or the script as the server needs, and settling
    /// the route on first use.
    pub(crate) async fn query<L: Link>(
        &self,
        link: &mut L,
        call: &Invocation,
    ) -> RedisResult<Value> {
        if let Some(module) = &call.module {
            if self.detect(link).await? {
                return link.send(module).await;
            }
        }
        let mut attempt = self.attempt();
        loop {
            let command = self.command(call, attempt.route, attempt.eval);
            let reply = link.send(&command).await;
            match self.next(&mut attempt, reply) {
                Next::Reply(reply) => return reply,
                Next::Send => {}
                Next::Load => self.loaded(&mut attempt, link.send(&load()).await)?,
            }
        }
    }

    /// A call's first send: on the route in use, by name.
    fn attempt(&self) -> Attempt {
        Attempt {
            route: self.next_route(),
            eval: false,
            failed: 0,
        }
    }

    /// What follows `reply` to `attempt`'s send: the result, or another send (or a load
    /// first). At most: fall back, then eval; or load, then call; the reply to a fourth
    /// send is the result.
    fn next(&self, attempt: &mut Attempt, reply: RedisResult<Value>) -> Next {
        if attempt.failed == 3 {
            return Next::Reply(reply);
        }
        let error = match reply {
            Ok(reply) => {
                self.settle(attempt.route);
                return Next::Reply(Ok(reply));
            }
            Err(error) => error,
        };
        attempt.failed += 1;
        match self.retry(attempt.route, error.code(), error.detail()) {
            Some(Retry::Eval) => attempt.eval = true,
            Some(Retry::Fallback) => attempt.route = self.fallback(),
            Some(Retry::Load) => return Next::Load,
            None => {
                if error.code().is_some() {
                    // The server answered: the route works.
                    self.settle(attempt.route);
                }
                return Next::Reply(Err(error));
            }
        }
        Next::Send
    }

    /// After `FUNCTION LOAD` replied `loaded`: the next send goes on scripts if the
    /// server refused it (see [`Program::load_failed`]).
    fn loaded(&self, attempt: &mut Attempt, loaded: RedisResult<Value>) -> RedisResult<()> {
        if let Err(e) = loaded {
            attempt.route = self.load_failed(e)?;
        }
        Ok(())
    }

    fn fallback(&self) -> Route {
        self.settle(Route::Scripts);
        Route::Scripts
    }
}

/// `COMMAND INFO` of the module's decision command.
fn module_info() -> Cmd {
    redis::cmd("COMMAND")
        .arg("INFO")
        .arg("sluicegate.check")
        .to_owned()
}

/// `FUNCTION LOAD REPLACE` of the library.
fn load() -> Cmd {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&LIBRARY.source)
        .to_owned()
}
