//! The configuration error, found when a layer is built.

/// A configuration error: found when the layer is built, never per request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A limit the core refuses (zero, or beyond its range).
    #[error(transparent)]
    Param(#[from] sluicegate_core::ParamError),
    /// Not a network (`10.0.0.0/8`, `::1`).
    #[error("not an IP network: {0:?}")]
    Cidr(String),
    /// A policy name that is not 1 to 64 letters, digits, `-`, `_` and `.`.
    #[error("policy names are 1 to 64 letters, digits, '-', '_' and '.': {0:?}")]
    PolicyName(String),
    /// The template has no such parameter.
    #[error("the path template {0:?} has no parameter {{{1}}}")]
    PathParam(String, &'static str),
    /// A `sluicegate serve` URL or token that cannot be used.
    #[error("{0}")]
    Remote(String),
}
