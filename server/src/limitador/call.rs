//! One call to limitador's limits, whichever front end it came through: its namespace
//! found for the app, decided, and counted in limitador's metrics.

use std::time::Instant;

use crate::service::auth::App;
use crate::service::Service;

use super::served::{Answer, Asked, LimitsError};

/// Decides `asked` for `app`: a namespace the file does not define, or does not let
/// `app` ask for, is one answer, so that neither tells the other apart.
pub(crate) async fn decide(
    service: &Service,
    app: &App,
    asked: &Asked<'_>,
) -> Result<Answer, LimitsError> {
    let limits = service.limitador();
    let ns = limits
        .config
        .namespace(asked.namespace)
        .filter(|ns| ns.admits_app(app.name()))
        .ok_or_else(|| {
            LimitsError::NotFound(format!(
                "no such namespace for this app: {:?}",
                asked.namespace
            ))
        })?;
    let start = Instant::now();
    let answer = limits.decide(ns, &*service.counters, asked).await?;
    service
        .limitador_calls
        .record(asked, &answer, start.elapsed());
    Ok(answer)
}
