//! What a gRPC call carries once the listener has admitted it.

use std::sync::Arc;

use crate::service::auth::App;
use crate::service::Served;

/// What a call carries once admitted: its app, authenticated from the metadata against
/// the policies served then, which the call decides on.
#[derive(Debug, Clone)]
pub(crate) struct Admitted {
    pub(crate) app: App,
    pub(crate) served: Arc<Served>,
}
