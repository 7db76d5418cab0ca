//! Envoy's rate limit service over gRPC (`--grpc-listen`): a gateway that speaks it
//! (Envoy's `envoy.filters.http.ratelimit`, and others) decides through sluicegate, with
//! every sluicegate algorithm.
//!
//! The mapping (also in `API.md`): the call carries an app token in its
//! `authorization` metadata (`Bearer sga_…`). Each descriptor is decided on one policy:
//! the value of its first entry `policy` if it has one, else the request's `domain`. The
//! key is the descriptor's other entries as `key=value` joined by `|`, in order
//! (`remote_address=10.0.0.1|path=/a`), with `\`, `|` and `=` inside a key or value
//! escaped by a `\`, so that no two lists of entries share a key. The cost is the descriptor's `hits_addend`, else
//! the request's (if not 0), else 1. A descriptor's `limit` override is ignored here (the
//! policy is the limit; in the domains of Envoy's YAML it is honoured, see `domains.rs`).
//!
//! Reports (limitador's `report`, for costs known after the response): a descriptor
//! holding an entry [`REPORT_ENTRY`] (any value; not part of the key) charges its cost
//! to the key, as `/v1/report` does but without an id (each call counts), up to the
//! policy's overdraft. Envoy sends it as the second call of a rate limit marked
//! `apply_on_stream_done`, with the response's cost as its `hits_addend`. A report
//! never makes the `overall_code` `OVER_LIMIT`; its status is `OVER_LIMIT` while the
//! key is in debt.
//!
//! A request whose `domain` is one of envoyproxy/ratelimit's YAML (`--envoy-config`)
//! is answered by their rules instead, as their service would (see `domains.rs`); one
//! whose `domain` is a namespace of limitador's limits file (`--limitador-config`), by
//! its limits, as limitador would (see `limitador.rs`).
//!
//! Shadow mode: a descriptor decided in shadow mode (its policy's `shadow`, or
//! `--shadow`) reports its would-be code in its status (`OVER_LIMIT` when enforcing
//! would deny) but never makes the `overall_code` `OVER_LIMIT`, which is what Envoy
//! acts on: the request goes through, and the status shows what would have happened.

mod admitted;
mod codec;
mod domains;
#[doc(hidden)]
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    missing_debug_implementations,
    unreachable_pub
)]
pub mod envoy;
mod governs;
#[doc(hidden)]
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    missing_debug_implementations,
    unreachable_pub
)]
pub mod kuadrant;
mod kuadrant_rls;
mod limitador;
mod mailbox;
mod quotas;
mod rlqs;
mod rls;
mod serve;
mod wire;

use rls::Rls;
pub use rls::REPORT_ENTRY;
pub(crate) use serve::{finish, spawn};
