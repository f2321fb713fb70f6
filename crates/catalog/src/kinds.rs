//! The resource kinds, declared once.
//!
//! A kind is a [`Kind`] of the store (an exhaustive enum: a new variant fails to compile until
//! every `match` over it handles it), its [`KindInfo`] (where it lives in the admin API and in
//! `httpdns apply` files, and its place in the dependency order) and a [`ResourceKind`] type
//! (its spec, how a name is canonicalised, how a body is validated). The admin routes, the
//! `apply` plan and client, and the catalog's model all read these; the wiring test
//! (`tests/integration/kinds.rs`) fails when a kind is declared here but missing from the
//! router, the OpenAPI document or the declarative file.

use httpdns_core::model::mirror::RuleSpec;
use httpdns_core::model::style::{validate_style_name, StyleSpec};
use httpdns_core::model::{
    parse_account_id, validate_resource_id, AccountSpec, DomainSpec, FieldError, NetworkSpec, NodeSpec,
    PoolSpec,
};
use httpdns_core::{DomainName, Token};
pub use httpdns_store::Kind;
use ipnet::IpNet;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::Published;

/// Where a kind is wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindInfo {
    pub kind: Kind,
    /// The plural name: the section of an `httpdns apply` file.
    pub section: &'static str,
    /// The admin API collection; one resource is `{base}/{name}`.
    pub base: &'static str,
    /// The router's pattern for the name segment. Networks take a catch-all, so a CIDR works
    /// percent-encoded (`1.0.1.0%2F24`, as documented) and with a literal slash.
    pub name_pattern: &'static str,
    /// What the name is called in errors.
    pub name_field: &'static str,
    /// In `httpdns apply` files. Accounts are not: they carry signing secrets, which do not
    /// belong in a file kept under version control.
    pub declarative: bool,
}

impl KindInfo {
    /// The admin URL of one resource (a CIDR's `/` percent-encoded).
    pub fn path(&self, name: &str) -> String {
        format!("{}/{}", self.base, name.replace('/', "%2F"))
    }
}

/// Every kind, in dependency order: a kind names only kinds before it (a node names a pool,
/// a domain a pool). Creates and updates go in this order, deletes in reverse.
pub const KINDS: [KindInfo; 7] = [
    KindInfo {
        kind: Kind::Network,
        section: "networks",
        base: "/admin/v1/networks",
        name_pattern: "{*name}",
        name_field: "cidr",
        declarative: true,
    },
    KindInfo {
        kind: Kind::Pool,
        section: "pools",
        base: "/admin/v1/pools",
        name_pattern: "{name}",
        name_field: "name",
        declarative: true,
    },
    KindInfo {
        kind: Kind::Node,
        section: "nodes",
        base: "/admin/v1/nodes",
        name_pattern: "{name}",
        name_field: "id",
        declarative: true,
    },
    KindInfo {
        kind: Kind::Domain,
        section: "domains",
        base: "/admin/v1/domains",
        name_pattern: "{name}",
        name_field: "name",
        declarative: true,
    },
    KindInfo {
        kind: Kind::MirrorRule,
        section: "mirror_rules",
        base: "/admin/v1/mirror/rules",
        name_pattern: "{name}",
        name_field: "name",
        declarative: true,
    },
    KindInfo {
        kind: Kind::ImageStyle,
        section: "image_styles",
        base: "/admin/v1/mirror/styles",
        name_pattern: "{name}",
        name_field: "name",
        declarative: true,
    },
    KindInfo {
        kind: Kind::Account,
        section: "accounts",
        base: "/admin/v1/accounts",
        name_pattern: "{name}",
        name_field: "id",
        declarative: false,
    },
];

/// The [`KindInfo`] of `kind`.
pub fn info(kind: Kind) -> &'static KindInfo {
    // Exhaustive on purpose: a new `Kind` does not compile until it has an entry.
    let index = match kind {
        Kind::Network => 0,
        Kind::Pool => 1,
        Kind::Node => 2,
        Kind::Domain => 3,
        Kind::MirrorRule => 4,
        Kind::ImageStyle => 5,
        Kind::Account => 6,
    };
    &KINDS[index]
}

/// What validation may allow, from the server's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Validation {
    /// Private and loopback node addresses (`HTTPDNS_ALLOW_PRIVATE_NODE_IPS`).
    pub allow_private_node_ips: bool,
    /// Mirror origins on this host or its link (`HTTPDNS_ALLOW_LOCAL_ORIGINS`).
    pub allow_local_origins: bool,
}

impl Validation {
    /// Everything that depends on a server's settings allowed: for checks made away from the
    /// server (`httpdns apply`), which leave those to the server.
    pub const PERMISSIVE: Validation = Validation { allow_private_node_ips: true, allow_local_origins: true };
}

/// One kind of resource: its spec and the rules of its names and bodies.
pub trait ResourceKind: Send + Sync + 'static {
    const KIND: Kind;
    type Spec: Serialize + DeserializeOwned + Send;

    fn info() -> &'static KindInfo {
        info(Self::KIND)
    }

    /// The canonical form of a name, or why it is not one.
    fn canonical_name(raw: &str) -> Result<String, FieldError>;

    fn validate(spec: &Self::Spec, validation: &Validation) -> Result<(), FieldError>;

    /// Names that exist without a stored body (pools named by a node or domain), served with
    /// default options.
    fn implied(_published: &Published) -> Vec<String> {
        Vec::new()
    }

    /// A stored body as reads show it: secrets replaced (default: as stored).
    fn shown(body: serde_json::Value) -> serde_json::Value {
        body
    }

    /// Whether bodies of this kind hold secrets that reads do not show.
    fn has_secrets() -> bool {
        false
    }

    /// A write that sends back a secret as reads show it keeps the stored one (`stored`: the
    /// resource as it is, if it exists); an error when there is none to keep.
    fn keep_secrets(_spec: &mut Self::Spec, _stored: Option<&Self::Spec>) -> Result<(), FieldError> {
        Ok(())
    }
}

pub struct Networks;
pub struct Nodes;
pub struct Pools;
pub struct Domains;
pub struct Accounts;
/// Rules of the mirroring gateway.
pub struct MirrorRules;
/// Named chains for `x-oss-process=style/<name>`.
pub struct ImageStyles;

impl ResourceKind for Accounts {
    const KIND: Kind = Kind::Account;
    type Spec = AccountSpec;

    fn canonical_name(raw: &str) -> Result<String, FieldError> {
        parse_account_id(raw).map(|n| n.to_string())
    }

    fn validate(spec: &AccountSpec, _: &Validation) -> Result<(), FieldError> {
        spec.validate()
    }
}

impl ResourceKind for Networks {
    const KIND: Kind = Kind::Network;
    type Spec = NetworkSpec;

    fn canonical_name(raw: &str) -> Result<String, FieldError> {
        let net: IpNet = raw.parse().map_err(|_| {
            FieldError::new(
                "cidr",
                format!("{raw:.64?} is not a CIDR such as 1.0.1.0/24 (percent-encode the '/')"),
            )
        })?;
        if net.trunc() != net {
            return Err(FieldError::new("cidr", format!("host bits are set; did you mean {}?", net.trunc())));
        }
        Ok(net.to_string())
    }

    fn validate(spec: &NetworkSpec, _: &Validation) -> Result<(), FieldError> {
        spec.validate()
    }
}

impl ResourceKind for Nodes {
    const KIND: Kind = Kind::Node;
    type Spec = NodeSpec;

    fn canonical_name(raw: &str) -> Result<String, FieldError> {
        validate_resource_id(raw).map(|()| raw.to_owned())
    }

    fn validate(spec: &NodeSpec, validation: &Validation) -> Result<(), FieldError> {
        spec.validate(validation.allow_private_node_ips)
    }
}

impl ResourceKind for Pools {
    const KIND: Kind = Kind::Pool;
    type Spec = PoolSpec;

    fn canonical_name(raw: &str) -> Result<String, FieldError> {
        Token::parse(raw).map(|t| t.to_string()).map_err(|e| FieldError::new("name", e.to_string()))
    }

    fn validate(spec: &PoolSpec, _: &Validation) -> Result<(), FieldError> {
        spec.validate()
    }

    /// "A pool exists as soon as a node or domain names it."
    fn implied(published: &Published) -> Vec<String> {
        published.pool_names().map(|t| t.to_string()).collect()
    }
}

impl ResourceKind for Domains {
    const KIND: Kind = Kind::Domain;
    type Spec = DomainSpec;

    fn canonical_name(raw: &str) -> Result<String, FieldError> {
        DomainName::parse_pattern(raw)
            .map(|d| d.to_string())
            .map_err(|e| FieldError::new("name", e.to_string()))
    }

    fn validate(spec: &DomainSpec, _: &Validation) -> Result<(), FieldError> {
        spec.validate()
    }
}

impl ResourceKind for MirrorRules {
    const KIND: Kind = Kind::MirrorRule;
    type Spec = RuleSpec;

    fn canonical_name(raw: &str) -> Result<String, FieldError> {
        validate_resource_id(raw).map(|()| raw.to_owned()).map_err(|e| FieldError::new("name", e.message))
    }

    fn validate(spec: &RuleSpec, validation: &Validation) -> Result<(), FieldError> {
        spec.validate_with(validation.allow_local_origins)
    }

    fn shown(body: serde_json::Value) -> serde_json::Value {
        httpdns_core::model::mirror::redacted(body)
    }

    fn has_secrets() -> bool {
        true
    }

    fn keep_secrets(spec: &mut RuleSpec, stored: Option<&RuleSpec>) -> Result<(), FieldError> {
        spec.keep_secret(stored)
    }
}

impl ResourceKind for ImageStyles {
    const KIND: Kind = Kind::ImageStyle;
    type Spec = StyleSpec;

    fn canonical_name(raw: &str) -> Result<String, FieldError> {
        validate_style_name(raw).map(|()| raw.to_owned())
    }

    fn validate(spec: &StyleSpec, _: &Validation) -> Result<(), FieldError> {
        spec.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_store_kind_has_one_entry_in_dependency_order() {
        for kind in Kind::ALL {
            assert_eq!(info(kind).kind, kind);
            assert_eq!(KINDS.iter().filter(|i| i.kind == kind).count(), 1, "{kind:?}");
        }
        assert_eq!(KINDS.len(), Kind::ALL.len());
        let at = |k: Kind| KINDS.iter().position(|i| i.kind == k).unwrap();
        // What names what: nodes and domains name pools.
        assert!(at(Kind::Pool) < at(Kind::Node) && at(Kind::Pool) < at(Kind::Domain));
    }

    #[test]
    fn paths_encode_the_slash_of_a_cidr() {
        assert_eq!(info(Kind::Network).path("1.0.1.0/24"), "/admin/v1/networks/1.0.1.0%2F24");
        assert_eq!(info(Kind::MirrorRule).path("img"), "/admin/v1/mirror/rules/img");
    }
}
