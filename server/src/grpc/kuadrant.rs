//! The code generated from Kuadrant's vendored proto (`vendor/proto/kuadrant/`).

/// `kuadrant.service`.
pub mod service {
    /// `kuadrant.service.ratelimit`.
    pub mod ratelimit {
        /// `kuadrant.service.ratelimit.v1`.
        pub mod v1 {
            tonic::include_proto!("kuadrant.service.ratelimit.v1");
        }
    }
}
