//! `merit serve`: live-mode repair memory ([`merit_live`]) behind an HTTP JSON API.
//!
//! - [`config`]: the TOML configuration: databases, API keys held as SHA-256 hashes, each key
//!   one tenant's and scoped to named databases, and the limits;
//! - [`service`]: the blocking service: authentication, tenancy (one live memory per tenant
//!   and database, so tenants never read or write each other's memory), asks, feedback,
//!   memory management, expiry;
//! - [`api`]: the axum routes, error statuses, body limit, and the serve loop with its
//!   periodic finalization of answers that got no feedback;
//! - [`mcp`]: the same operations as Model Context Protocol tools, over stdio (`merit mcp`)
//!   or streamable HTTP (`/mcp` beside the JSON API), with the same keys and tenancy.
//!
//! The binary (`merit serve`) only loads the models and the configuration and calls
//! [`api::serve`].

#![warn(missing_docs)]

pub mod api;
pub mod config;
pub mod mcp;
pub mod service;

pub use api::{router, serve};
pub use config::{hash_key, ServeConfig};
pub use mcp::MeritMcp;
pub use service::{Caller, ScoredMemory, Service, ServiceError, ServiceModels, StartError};
