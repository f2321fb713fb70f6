//! The vendors' server-side switches: what operators tell the apps that run Alibaba's and
//! Tencent's official SDKs through the answers those SDKs already read (docs/api.md, "Vendor
//! switches").
//!
//! * `alibaba_service_status` is `/ss`'s `service_status`: `"disable"` turns the Alibaba SDKs
//!   that read it off (the kill switch), `"enable"` is sent explicitly so that SDKs which kept a
//!   disable learn it is over, and unset sends nothing (the answer of before).
//! * `tencent_log` and `tencent_domain` are `/conf`'s `log:` and `domain:` (`1` or `0`).
//!
//! Both vendors' SDKs ask per account (`/{account}/ss`, `/conf?id=` or `token=`), so a setting
//! is global with per-account overrides, field by field. The setting lives in the store
//! (`vendor_switches`) and every replica reads it with its heartbeat ([`Board::load`]), so
//! each replica, and one restarted, answers with it; the replica that takes a `PUT` answers
//! with it at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use httpdns_store::{Store, StoreError};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// `/ss`'s `service_status` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceStatus {
    Enable,
    Disable,
}

impl ServiceStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enable => "enable",
            Self::Disable => "disable",
        }
    }
}

/// One scope's switches. A field left out (or null) inherits: an account's from the global
/// scope, the global scope's from the defaults (nothing in `/ss`, `log:0|domain:0`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alibaba_service_status: Option<ServiceStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tencent_log: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tencent_domain: Option<bool>,
}

/// The fields of [`Scope`], for reading rows a newer release may have written with more.
const SCOPE_FIELDS: [&str; 3] = ["alibaba_service_status", "tencent_log", "tencent_domain"];

impl Scope {
    /// Field by field: `self`'s value, else `base`'s.
    fn over(self, base: Scope) -> Scope {
        Scope {
            alibaba_service_status: self.alibaba_service_status.or(base.alibaba_service_status),
            tencent_log: self.tencent_log.or(base.tencent_log),
            tencent_domain: self.tencent_domain.or(base.tencent_domain),
        }
    }

    /// A stored row, ignoring fields this release does not know (a newer replica's): an older
    /// replica must keep the switches it does know during a rolling upgrade.
    fn from_stored(body: &str) -> Option<Scope> {
        let mut map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(body).ok()?;
        map.retain(|k, _| SCOPE_FIELDS.contains(&k.as_str()));
        serde_json::from_value(serde_json::Value::Object(map)).ok()
    }
}

/// The whole setting: the `PUT` body and the `GET` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VendorSwitches {
    #[serde(default)]
    pub global: Scope,
    /// By account id (as in `/{account}/ss` and `/conf?id=`).
    #[serde(default)]
    pub accounts: BTreeMap<u32, Scope>,
}

/// The switches one answer carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Effective {
    /// `None`: `/ss` carries no `service_status`.
    pub service_status: Option<ServiceStatus>,
    pub log: bool,
    pub domain: bool,
}

/// The scope name of the global row in the store.
const GLOBAL: &str = "global";

impl VendorSwitches {
    /// What an answer to `account` (or to no account) carries.
    pub fn effective(&self, account: Option<u32>) -> Effective {
        let own = account.and_then(|a| self.accounts.get(&a)).copied().unwrap_or_default();
        let s = own.over(self.global);
        Effective {
            service_status: s.alibaba_service_status,
            log: s.tencent_log.unwrap_or(false),
            domain: s.tencent_domain.unwrap_or(false),
        }
    }

    pub(crate) fn to_rows(&self) -> Vec<(String, String)> {
        let body = |s: &Scope| serde_json::to_string(s).expect("a scope serialises");
        std::iter::once((GLOBAL.to_owned(), body(&self.global)))
            .chain(self.accounts.iter().map(|(id, s)| (id.to_string(), body(s))))
            .collect()
    }

    pub(crate) fn from_rows(rows: Vec<(String, String)>) -> Self {
        let mut out = Self::default();
        for (scope, body) in rows {
            let Some(s) = Scope::from_stored(&body) else {
                tracing::warn!(scope, "A vendor switch row does not parse; ignored.");
                continue;
            };
            match scope.as_str() {
                GLOBAL => out.global = s,
                id => match httpdns_core::model::parse_account_id(id) {
                    Ok(id) => {
                        out.accounts.insert(id, s);
                    }
                    Err(_) => tracing::warn!(scope, "A vendor switch row names no account; ignored."),
                },
            }
        }
        out
    }
}

/// This replica's copy of the setting, read by `/ss` and `/conf` without waiting for the store.
#[derive(Debug, Default)]
pub struct Board {
    current: ArcSwap<VendorSwitches>,
}

impl Board {
    pub fn get(&self) -> Arc<VendorSwitches> {
        self.current.load_full()
    }

    /// Reads the setting from the store. On failure the copy is kept: during a database outage
    /// the last setting read is the best knowledge there is.
    pub async fn load(&self, store: &Store) -> Result<(), StoreError> {
        let rows = store.vendor_switches().await?;
        self.current.store(Arc::new(VendorSwitches::from_rows(rows)));
        Ok(())
    }

    /// Answers with `doc` from now on (this replica; the others read it from the store).
    pub(crate) fn set(&self, doc: VendorSwitches) {
        self.current.store(Arc::new(doc));
    }
}

/// The `PUT` body as sent: account keys are read as strings so that a bad one is a 400 naming
/// it (serde reports a number key that does not parse without its path).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    #[serde(default)]
    global: Scope,
    #[serde(default)]
    accounts: BTreeMap<String, Scope>,
}

/// The strict body.
pub(crate) fn parse(body: &[u8]) -> Result<VendorSwitches, ApiError> {
    let raw: Body = crate::admin::body::parse(body)?;
    let mut accounts = BTreeMap::new();
    for (key, scope) in raw.accounts {
        let id = httpdns_core::model::parse_account_id(&key).map_err(|_| {
            ApiError::bad_request(
                "InvalidBody",
                format!("accounts.{key}"),
                "accounts are keyed by account id (1 to 4294967295)",
            )
        })?;
        accounts.insert(id, scope);
    }
    Ok(VendorSwitches { global: raw.global, accounts })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(json: &str) -> VendorSwitches {
        parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn accounts_override_the_global_scope_field_by_field() {
        let d = doc(r#"{"global": {"alibaba_service_status": "disable", "tencent_log": true},
                "accounts": {"139450": {"alibaba_service_status": "enable", "tencent_domain": true}}}"#);
        assert_eq!(
            d.effective(None),
            Effective { service_status: Some(ServiceStatus::Disable), log: true, domain: false }
        );
        assert_eq!(
            d.effective(Some(139450)),
            Effective { service_status: Some(ServiceStatus::Enable), log: true, domain: true }
        );
        assert_eq!(d.effective(Some(7)), d.effective(None), "an account without its own scope");
        assert_eq!(VendorSwitches::default().effective(Some(7)), Effective::default());
    }

    #[test]
    fn the_store_round_trip_keeps_every_scope_and_skips_what_it_cannot_read() {
        let d = doc(
            r#"{"global": {"tencent_log": true}, "accounts": {"42": {"alibaba_service_status": "disable"}}}"#,
        );
        assert_eq!(VendorSwitches::from_rows(d.to_rows()), d);
        let mut rows = d.to_rows();
        // A newer replica's field is ignored, not the whole row; rows that make no sense go.
        rows[0].1 = r#"{"tencent_log": true, "huawei_kill": true}"#.into();
        rows.push(("nobody".into(), "{}".into()));
        rows.push(("43".into(), "not json".into()));
        assert_eq!(VendorSwitches::from_rows(rows), d);
    }

    #[test]
    fn bad_bodies_name_the_field() {
        let field = |json: &str| parse(json.as_bytes()).unwrap_err().field.unwrap();
        assert_eq!(
            field(r#"{"global": {"alibaba_service_status": "off"}}"#),
            "global.alibaba_service_status"
        );
        assert_eq!(field(r#"{"global": {"tencent_log": 1}}"#), "global.tencent_log");
        assert_eq!(field(r#"{"global": {"kill": true}}"#), "global.kill");
        assert_eq!(field(r#"{"everything": true}"#), "everything");
        assert_eq!(field(r#"{"accounts": {"abc": {}}}"#), "accounts.abc");
        assert_eq!(field(r#"{"accounts": {"007": {}}}"#), "accounts.007");
        assert_eq!(field(r#"{"accounts": {"0": {}}}"#), "accounts.0");
        assert_eq!(field(r#"{"accounts": {"1": {"tencent_domain": "yes"}}}"#), "accounts.1.tencent_domain");
        assert_eq!(field("[]"), "body");
    }
}
