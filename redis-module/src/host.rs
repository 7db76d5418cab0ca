//! The commands' side of the module API, called directly: arguments read in place, a
//! key's value read and written in place (DMA), effects replicated from arguments Redis
//! already holds, replies written integer by integer.
//!
//! The `redis-module` crate's command wrappers retain every argument as an owned
//! string, build replies as trees and format each replicated argument into a new
//! string; at the server those cost more than the decision itself (measured in the
//! guide, docs/redis-module.md).

// The module API is C: this file is where the crate calls it.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_long, c_longlong, CStr};
use std::ptr;
use std::slice;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleKey, RedisModuleString};
use sluicegate_core::Ticks;

use crate::engine::{Failure, Fields, Write};

/// What a command replies.
pub(crate) enum Reply {
    /// An array of integers.
    Integers(Fields),
    /// The same integers as one bulk string, each big-endian, eight bytes.
    Packed(Fields),
    /// One integer.
    Integer(i64),
    /// A bulk string (`SLUICEGATE.BATCH`'s records).
    Bytes(Vec<u8>),
    /// Nothing: Redis asked where the keys are (`COMMAND GETKEYS`, Cluster).
    KeyPositions,
}

/// A command's error reply: its first word is the error code.
pub(crate) type Error = String;

/// A command: the call, and the arguments after its name as bytes.
pub(crate) type Command = fn(&Call<'_>, &[&[u8]]) -> Result<Reply, Error>;

/// The arguments most commands have (a composite of four buckets with options): read
/// into an array on the stack, more into a vector.
const INLINE_ARGS: usize = 32;

/// One call of a command: Redis's context and the arguments as Redis holds them.
pub(crate) struct Call<'a> {
    ctx: *mut RedisModuleCtx,
    argv: &'a [*mut RedisModuleString],
}

/// Runs `command` for Redis and writes its reply: the body of every registered command.
///
/// # Safety
/// `ctx`, `argv` and `argc` are those Redis passed to the command.
pub(crate) unsafe fn run(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
    command: Command,
) -> c_int {
    let argv = match usize::try_from(argc) {
        Ok(n) if !argv.is_null() => slice::from_raw_parts(argv, n),
        _ => &[],
    };
    let call = Call { ctx, argv };
    let rest = argv.get(1..).unwrap_or_default();
    let result = if rest.len() <= INLINE_ARGS {
        let mut inline: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
        for (slot, &arg) in inline.iter_mut().zip(rest) {
            *slot = bytes(arg);
        }
        command(&call, &inline[..rest.len()])
    } else {
        let args: Vec<&[u8]> = rest.iter().map(|&arg| bytes(arg)).collect();
        command(&call, &args)
    };
    match result {
        Ok(Reply::Integers(fields)) => {
            let fields = fields.as_slice();
            raw::RedisModule_ReplyWithArray.unwrap()(ctx, fields.len() as c_long);
            for &field in fields {
                raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, field);
            }
        }
        Ok(Reply::Packed(fields)) => {
            let mut packed = [0u8; 8 * Fields::MAX];
            let fields = fields.as_slice();
            for (bytes, field) in packed.chunks_exact_mut(8).zip(fields) {
                bytes.copy_from_slice(&field.to_be_bytes());
            }
            let len = 8 * fields.len();
            raw::RedisModule_ReplyWithStringBuffer.unwrap()(ctx, packed.as_ptr().cast(), len);
        }
        Ok(Reply::Integer(n)) => {
            raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, n);
        }
        Ok(Reply::Bytes(bytes)) => {
            let ptr = bytes.as_ptr().cast::<c_char>();
            raw::RedisModule_ReplyWithStringBuffer.unwrap()(ctx, ptr, bytes.len());
        }
        Ok(Reply::KeyPositions) => {}
        Err(message) => {
            // A RESP error is one line.
            let line: Vec<u8> = message
                .bytes()
                .map(|b| {
                    if matches!(b, b'\r' | b'\n' | 0) {
                        b' '
                    } else {
                        b
                    }
                })
                .chain([0])
                .collect();
            raw::RedisModule_ReplyWithError.unwrap()(ctx, line.as_ptr().cast::<c_char>());
        }
    }
    raw::Status::Ok as c_int
}

/// A string's bytes, in place.
///
/// # Safety
/// `s` is a live string; the bytes live as long as it.
unsafe fn bytes<'a>(s: *mut RedisModuleString) -> &'a [u8] {
    let mut len = 0;
    let ptr = raw::RedisModule_StringPtrLen.unwrap()(s, &mut len);
    if ptr.is_null() {
        return &[];
    }
    slice::from_raw_parts(ptr.cast::<u8>(), len)
}

impl Call<'_> {
    /// Whether Redis asks where the keys are rather than running the command.
    pub(crate) fn is_keys_position_request(&self) -> bool {
        unsafe { raw::RedisModule_IsKeysPositionRequest.unwrap()(self.ctx) != 0 }
    }

    /// Declares argument `pos` (counting the command's name) a key.
    pub(crate) fn key_at(&self, pos: usize) {
        let pos = c_int::try_from(pos).unwrap_or(c_int::MAX);
        unsafe { raw::RedisModule_KeyAtPos.unwrap()(self.ctx, pos) }
    }

    /// Opens the key named by argument `pos` (counting the command's name), for writing
    /// or not; `None` if there is no such argument.
    pub(crate) fn open(&self, pos: usize, write: bool) -> Option<Key<'_>> {
        let name = *self.argv.get(pos)?;
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        let handle = unsafe { raw::RedisModule_OpenKey.unwrap()(self.ctx, name, mode as c_int) };
        Some(Key {
            call: self,
            name,
            handle,
        })
    }
}

/// A key opened for a command; closed when dropped.
pub(crate) struct Key<'a> {
    call: &'a Call<'a>,
    name: *mut RedisModuleString,
    handle: *mut RedisModuleKey,
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        unsafe { raw::RedisModule_CloseKey.unwrap()(self.handle) }
    }
}

/// `PXAT`, made once when the module loads: a replicated argument Redis then only
/// counts a reference to, where a C string would be copied into a new one per write.
static PXAT: AtomicPtr<RedisModuleString> = AtomicPtr::new(ptr::null_mut());

/// Makes the strings every replicated write shares; called once when the module loads.
pub(crate) fn init() {
    let word = b"PXAT";
    // No context: kept for the module's life.
    let pxat = unsafe {
        raw::RedisModule_CreateString.unwrap()(
            ptr::null_mut(),
            word.as_ptr().cast::<c_char>(),
            word.len(),
        )
    };
    PXAT.store(pxat, Ordering::Relaxed);
}

impl Key<'_> {
    /// The string held, in place; `None` when absent; a key of another type is refused.
    pub(crate) fn value(&self) -> Result<Option<&[u8]>, Failure> {
        let kind = unsafe { raw::RedisModule_KeyType.unwrap()(self.handle) } as isize;
        match kind {
            raw::REDISMODULE_KEYTYPE_EMPTY => Ok(None),
            raw::REDISMODULE_KEYTYPE_STRING => {
                let mut len = 0;
                let mode = raw::REDISMODULE_READ as c_int;
                let ptr =
                    unsafe { raw::RedisModule_StringDMA.unwrap()(self.handle, &mut len, mode) };
                if ptr.is_null() {
                    return Err(Failure::Foreign("string"));
                }
                Ok(Some(unsafe {
                    slice::from_raw_parts(ptr.cast::<u8>(), len)
                }))
            }
            other => Err(Failure::Foreign(type_name(other))),
        }
    }

    /// Stores `write` as the scripts do and replicates the effect: `SET key bytes PXAT
    /// t` at the server's time (an absolute expiry, so a replica or an AOF replay
    /// expires the key when the primary does, whenever it applies the write), `SET key
    /// bytes` at an explicit time, `DEL key` when fresh. Takes `&mut self`: nothing
    /// read from the key may live across its write.
    pub(crate) fn store(
        &mut self,
        had: bool,
        write: Write,
        now: Ticks,
        explicit: bool,
    ) -> Result<(), Error> {
        let failed = || "ERR sluicegate could not write the key".to_owned();
        let ctx = self.call.ctx;
        unsafe {
            match write {
                Some((bytes, reset)) => {
                    let bytes = bytes.as_slice();
                    if raw::RedisModule_StringTruncate.unwrap()(self.handle, bytes.len())
                        != raw::Status::Ok as c_int
                    {
                        return Err(failed());
                    }
                    let mut len = 0;
                    let mode = raw::REDISMODULE_WRITE as c_int;
                    let dma = raw::RedisModule_StringDMA.unwrap()(self.handle, &mut len, mode);
                    if dma.is_null() || len != bytes.len() {
                        return Err(failed());
                    }
                    ptr::copy_nonoverlapping(bytes.as_ptr(), dma.cast::<u8>(), len);
                    let set = c"SET".as_ptr();
                    let value = bytes.as_ptr().cast::<c_char>();
                    if explicit {
                        let none = c_longlong::from(raw::REDISMODULE_NO_EXPIRE);
                        raw::RedisModule_SetExpire.unwrap()(self.handle, none);
                        raw::RedisModule_Replicate.unwrap()(
                            ctx,
                            set,
                            c"sb".as_ptr(),
                            self.name,
                            value,
                            len,
                        );
                    } else {
                        let ttl = reset.div_ceil(1000).max(1);
                        let ms = c_longlong::try_from(ttl).unwrap_or(c_longlong::MAX);
                        raw::RedisModule_SetExpire.unwrap()(self.handle, ms);
                        let at = c_longlong::try_from((now / 1000).saturating_add(ttl))
                            .unwrap_or(c_longlong::MAX);
                        raw::RedisModule_Replicate.unwrap()(
                            ctx,
                            set,
                            c"sbsl".as_ptr(),
                            self.name,
                            value,
                            len,
                            PXAT.load(Ordering::Relaxed),
                            at,
                        );
                    }
                }
                None if had => {
                    raw::RedisModule_DeleteKey.unwrap()(self.handle);
                    raw::RedisModule_Replicate.unwrap()(
                        ctx,
                        c"DEL".as_ptr(),
                        c"s".as_ptr(),
                        self.name,
                    );
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// The name `TYPE` gives a key of this type.
fn type_name(kind: isize) -> &'static str {
    match kind {
        raw::REDISMODULE_KEYTYPE_STRING => "string",
        raw::REDISMODULE_KEYTYPE_LIST => "list",
        raw::REDISMODULE_KEYTYPE_HASH => "hash",
        raw::REDISMODULE_KEYTYPE_SET => "set",
        raw::REDISMODULE_KEYTYPE_ZSET => "zset",
        raw::REDISMODULE_KEYTYPE_MODULE => "module value",
        raw::REDISMODULE_KEYTYPE_STREAM => "stream",
        _ => "none",
    }
}

/// A command's C entry point: Redis calls it, it runs `$command` through [`run`].
/// (Unit tests register nothing.)
#[cfg(not(test))]
macro_rules! entry {
    ($command:path) => {{
        #[allow(unsafe_code)]
        unsafe extern "C" fn entry(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            // Called by Redis with its own context and arguments.
            unsafe { $crate::host::run(ctx, argv, argc, $command) }
        }
        entry
    }};
}
#[cfg(not(test))]
pub(crate) use entry;

/// The C signature of a command's entry point.
pub(crate) type Entry =
    unsafe extern "C" fn(*mut RedisModuleCtx, *mut *mut RedisModuleString, c_int) -> c_int;

/// Registers a command (`name`, `flags` and key positions as `COMMAND INFO` shows
/// them); `false` if Redis refused it.
pub(crate) fn register(
    ctx: *mut RedisModuleCtx,
    name: &CStr,
    entry: Entry,
    flags: &CStr,
    keys: (c_int, c_int, c_int),
) -> bool {
    let (first, last, step) = keys;
    let status = unsafe {
        raw::RedisModule_CreateCommand.unwrap()(
            ctx,
            name.as_ptr(),
            Some(entry),
            flags.as_ptr(),
            first,
            last,
            step,
        )
    };
    status == raw::Status::Ok as c_int
}
