//! The code generated from the vendored protos (`vendor/proto/`).

/// `envoy.config.core.v3`.
pub mod config {
    /// `envoy.config.core`.
    pub mod core {
        /// `envoy.config.core.v3`.
        pub mod v3 {
            tonic::include_proto!("envoy.config.core.v3");
        }
    }
}
/// `envoy.extensions`.
pub mod extensions {
    /// `envoy.extensions.common`.
    pub mod common {
        /// `envoy.extensions.common.ratelimit`.
        pub mod ratelimit {
            /// `envoy.extensions.common.ratelimit.v3`.
            pub mod v3 {
                tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
            }
        }
    }
}
/// `envoy.type`.
pub mod r#type {
    /// `envoy.type.v3`.
    pub mod v3 {
        include!(concat!(env!("OUT_DIR"), "/envoy.r#type.v3.rs"));
    }
}
/// `envoy.service`.
pub mod service {
    /// `envoy.service.ratelimit`.
    pub mod ratelimit {
        /// `envoy.service.ratelimit.v3`.
        pub mod v3 {
            tonic::include_proto!("envoy.service.ratelimit.v3");
        }
    }
    /// `envoy.service.rate_limit_quota`.
    pub mod rate_limit_quota {
        /// `envoy.service.rate_limit_quota.v3`.
        pub mod v3 {
            tonic::include_proto!("envoy.service.rate_limit_quota.v3");
        }
    }
}
