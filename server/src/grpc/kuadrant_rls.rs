//! Kuadrant's rate limit service (`kuadrant.service.ratelimit.v1.RateLimitService`) over
//! limitador's namespaces: `CheckRateLimit` answers whether `hits_addend` (0 is 1) fits
//! every counter that applies, counting nothing; `Report` counts `hits_addend` on all
//! of them whatever the limit (token-based limits: check before, report the tokens
//! after). A domain that is not one of limitador's namespaces is refused.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::admitted::Admitted;
use super::envoy::service::ratelimit::v3::rate_limit_response::Code;
use super::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use super::kuadrant::service::ratelimit::v1::rate_limit_service_server::{
    RateLimitService as KuadrantService, RateLimitServiceServer,
};
use super::limitador::{asked, header_values, limits_status};
use crate::limitador::{self, Mode};
use crate::service::Service;

/// Kuadrant's service, deciding through the decision service.
#[derive(Debug, Clone)]
pub(crate) struct Kuadrant {
    service: Arc<Service>,
}

impl Kuadrant {
    /// The gRPC service over `service`.
    pub(crate) fn server(service: Arc<Service>) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(Self { service })
    }

    async fn answer(
        &self,
        mut request: Request<RateLimitRequest>,
        mode: Mode,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let Some(Admitted { app, .. }) = request.extensions_mut().remove::<Admitted>() else {
            return Err(Status::unauthenticated("the call was not admitted"));
        };
        let request = request.into_inner();
        let mut asked = asked(&request.domain, &request, mode);
        if mode == Mode::Update {
            asked.delta = u64::from(request.hits_addend);
        }
        let answer = limitador::decide(&self.service, &app, &asked)
            .await
            .map_err(limits_status)?;
        let over = !answer.admitted && !self.service.config.shadow;
        Ok(Response::new(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            response_headers_to_add: header_values(&self.service, &answer),
            ..RateLimitResponse::default()
        }))
    }
}

#[tonic::async_trait]
impl KuadrantService for Kuadrant {
    async fn check_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.answer(request, Mode::Check).await
    }

    async fn report(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.answer(request, Mode::Update).await
    }
}
