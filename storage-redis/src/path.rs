//! How a call reaches the server: the function library (`FCALL`, Redis ≥ 7) or a script
//! (`EVALSHA`), chosen by the caller or detected on first use.

use std::sync::atomic::{AtomicU8, Ordering};

use std::borrow::Cow;

use redis::{aio, Cmd, ConnectionLike, RedisError, RedisResult, Value};

use crate::lua::LIBRARY;

/// The way calls reach the server, fastest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Path {
    /// The native module's commands (`tollgate-redis-module`). Not selectable yet: the
    /// client does not speak the module's commands; choosing it is
    /// [`Error::Unsupported`](crate::Error::Unsupported). Detection will try it first
    /// once it is.
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

/// What to do after an error reply.
enum Retry {
    /// `NOSCRIPT`: send the script's text.
    Eval,
    /// The function does not exist: load the library.
    Load,
    /// The server has no `FCALL`: use scripts from now on.
    Fallback,
}

/// One call: the function's suffix in the library, whether it only reads, and the
/// command for the path in use when it was made (its name, the count of keys, the keys
/// and the arguments). Built once per call; a retry on another path copies its
/// arguments behind another name.
pub(crate) struct Invocation {
    function: &'static str,
    read_only: bool,
    path: Path,
    /// The command; callers append the arguments after the keys.
    pub(crate) cmd: Cmd,
}

/// A script and its place in the function library, with the path calls take.
#[derive(Debug)]
pub(crate) struct Program {
    source: String,
    sha1: String,
    /// The path chosen by the caller, if any.
    forced: Option<Path>,
    /// The path detected (`UNKNOWN` until the first call), when none was chosen.
    detected: AtomicU8,
}

impl Clone for Program {
    fn clone(&self) -> Self {
        Self {
            source: self.source.clone(),
            sha1: self.sha1.clone(),
            forced: self.forced,
            detected: AtomicU8::new(self.detected.load(Ordering::Relaxed)),
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
        }
    }

    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// Forces `path` (`None`: detect it).
    pub(crate) fn force(&mut self, path: Option<Path>) -> Result<(), crate::Error> {
        if path == Some(Path::Module) {
            return Err(crate::Error::Unsupported("the module path"));
        }
        self.forced = path;
        Ok(())
    }

    /// The path calls take: the chosen one, else the one detected; `None` before the
    /// first call detects it.
    pub(crate) fn path(&self) -> Option<Path> {
        self.forced.or(match self.detected.load(Ordering::Relaxed) {
            FUNCTIONS => Some(Path::Functions),
            SCRIPTS => Some(Path::Scripts),
            _ => None,
        })
    }

    /// The path the next call tries: detection starts with the library.
    fn next_path(&self) -> Path {
        self.path().unwrap_or(Path::Functions)
    }

    fn settle(&self, path: Path) {
        if self.forced.is_none() {
            let code = if path == Path::Functions {
                FUNCTIONS
            } else {
                SCRIPTS
            };
            self.detected.store(code, Ordering::Relaxed);
        }
    }

    /// A call of `function` on `keys`, on the path in use; its arguments are appended
    /// to its `cmd`.
    pub(crate) fn invocation<K: redis::ToRedisArgs>(
        &self,
        function: &'static str,
        read_only: bool,
        keys: &[K],
    ) -> Invocation {
        let path = self.next_path();
        let mut cmd = self.head(function, read_only, path, false);
        cmd.arg(keys.len()).arg(keys);
        Invocation {
            function,
            read_only,
            path,
            cmd,
        }
    }

    /// The command's name and first argument: the function, or the script.
    fn head(&self, function: &str, read_only: bool, path: Path, eval: bool) -> Cmd {
        match (path, eval) {
            (Path::Functions | Path::Module, _) => {
                let name = if read_only { "FCALL_RO" } else { "FCALL" };
                redis::cmd(name).arg(LIBRARY.function(function)).to_owned()
            }
            (Path::Scripts, false) => redis::cmd("EVALSHA").arg(&self.sha1).to_owned(),
            (Path::Scripts, true) => redis::cmd("EVAL").arg(&self.source).to_owned(),
        }
    }

    /// `call` on `path` (`eval`: with the script's text): its own command when that is
    /// the one, else a copy under another head.
    fn command<'a>(&self, call: &'a Invocation, path: Path, eval: bool) -> Cow<'a, Cmd> {
        if path == call.path && !eval {
            return Cow::Borrowed(&call.cmd);
        }
        let mut cmd = self.head(call.function, call.read_only, path, eval);
        for arg in call.cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        Cow::Owned(cmd)
    }

    fn retry(&self, path: Path, code: Option<&str>, detail: Option<&str>) -> Option<Retry> {
        let detail = detail.unwrap_or_default();
        match (path, code) {
            (Path::Scripts, Some("NOSCRIPT")) => Some(Retry::Eval),
            (Path::Functions, Some("ERR")) if detail.starts_with("Function not found") => {
                Some(Retry::Load)
            }
            (Path::Functions, Some("ERR"))
                if self.forced.is_none() && detail.starts_with("unknown command") =>
            {
                Some(Retry::Fallback)
            }
            _ => None,
        }
    }

    /// Whether a pipelined reply must go again alone (the script or library missing, or
    /// no `FCALL`), on whichever path it was sent: an earlier reply of the same
    /// pipeline may have settled the path since.
    pub(crate) fn must_retry(&self, reply: &Value) -> bool {
        match reply {
            Value::ServerError(e) => [Path::Functions, Path::Scripts]
                .into_iter()
                .any(|path| self.retry(path, Some(e.code()), e.details()).is_some()),
            _ => false,
        }
    }

    /// After a failed `FUNCTION LOAD`: detection falls back to scripts on a server's
    /// refusal (`FUNCTION` renamed away, say); a chosen path reports it.
    fn load_failed(&self, error: RedisError) -> RedisResult<Path> {
        if self.forced.is_none() && error.code().is_some() {
            self.settle(Path::Scripts);
            Ok(Path::Scripts)
        } else {
            Err(error)
        }
    }

    /// Runs `call`, loading the library or the script as the server needs, and settling
    /// the path on first use.
    pub(crate) fn query<C: ConnectionLike>(
        &self,
        con: &mut C,
        call: &Invocation,
    ) -> RedisResult<Value> {
        let (mut path, mut eval) = (self.next_path(), false);
        // At most: fall back, then eval; or load, then call.
        for _ in 0..3 {
            let error = match self.command(call, path, eval).query::<Value>(con) {
                Ok(reply) => {
                    self.settle(path);
                    return Ok(reply);
                }
                Err(error) => error,
            };
            match self.retry(path, error.code(), error.detail()) {
                Some(Retry::Eval) => eval = true,
                Some(Retry::Fallback) => path = self.fallback(),
                Some(Retry::Load) => {
                    if let Err(e) = load().query::<Value>(con) {
                        path = self.load_failed(e)?;
                    }
                }
                None => {
                    if error.code().is_some() {
                        // The server answered: the path works.
                        self.settle(path);
                    }
                    return Err(error);
                }
            }
        }
        self.command(call, path, eval).query(con)
    }

    /// Asynchronous [`Program::query`].
    pub(crate) async fn query_async<C: aio::ConnectionLike>(
        &self,
        con: &mut C,
        call: &Invocation,
    ) -> RedisResult<Value> {
        let (mut path, mut eval) = (self.next_path(), false);
        for _ in 0..3 {
            let error = match self
                .command(call, path, eval)
                .query_async::<Value>(con)
                .await
            {
                Ok(reply) => {
                    self.settle(path);
                    return Ok(reply);
                }
                Err(error) => error,
            };
            match self.retry(path, error.code(), error.detail()) {
                Some(Retry::Eval) => eval = true,
                Some(Retry::Fallback) => path = self.fallback(),
                Some(Retry::Load) => {
                    if let Err(e) = load().query_async::<Value>(con).await {
                        path = self.load_failed(e)?;
                    }
                }
                None => {
                    if error.code().is_some() {
                        self.settle(path);
                    }
                    return Err(error);
                }
            }
        }
        self.command(call, path, eval).query_async(con).await
    }

    fn fallback(&self) -> Path {
        self.settle(Path::Scripts);
        Path::Scripts
    }
}

/// `FUNCTION LOAD REPLACE` of the library.
fn load() -> Cmd {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&LIBRARY.source)
        .to_owned()
}
