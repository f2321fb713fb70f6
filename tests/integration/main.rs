//! Integration tests: real servers on port 0, real SQLite and PostgreSQL databases
//! (PostgreSQL when `HTTPDNS_TEST_POSTGRES_URL` is set), real HTTP clients.

mod admin;
mod answers;
mod apply;
mod auth;
mod backup;
mod cli;
mod clients;
mod config_center;
mod console;
mod console_lockout;
mod deploy;
mod dns;
mod dns_rfcs;
mod events;
mod events_unknown;
mod geoip;
mod hostile;
mod kinds;
mod live;
mod logs;
mod metrics;
mod mirror;
mod mirror_images;
mod openapi;
mod origin;
mod persistence;
mod promtool;
mod proxy;
mod sendfile;
mod shortcut;
mod shutdown;
mod support;
mod tls;
mod topology;
mod upstream;
