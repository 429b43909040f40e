//! Test areas, one file each, sharing `support`.

mod auth;
mod cli;
mod durability;
mod envelope;
mod sessions;
mod subscriptions;
mod support;
