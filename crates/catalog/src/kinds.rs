//! The resource kinds, declared once.
//!
//! A kind is a [`Kind`] of the store (an exhaustive enum: a new variant fails to compile until
//! every `match` over it handles it) and a [`ResourceKind`] type: its spec, how a name is
//! canonicalised, how a body is validated, and its [`KindInfo`] (where it lives in the admin
//! API, the OpenAPI document and `httpdns apply` files, and an example). `declare_kinds!`
//! lists the types once, in dependency order, and gives [`KINDS`] (the infos) and
//! [`each_kind`] (the types, for code generic over a kind). The admin router, the OpenAPI
//! paths, `apply`'s file sections, plan and client, and the catalog's model derive from these;
//! the wiring test (`tests/integration/kinds.rs`) fails when a kind declared here is missing
//! from the router, the OpenAPI document, the catalog or the declarative file.

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
    /// How the OpenAPI document describes the kind's routes.
    pub doc: KindDoc,
    /// A valid resource: its name and its body as JSON (written by the wiring tests).
    pub example: (&'static str, &'static str),
}

/// How the OpenAPI document (`crates/api/src/openapi`) describes a kind's two routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindDoc {
    /// The spec's schema under `components/schemas` (written by hand there).
    pub schema: &'static str,
    /// The tag of the kind's operations.
    pub tag: &'static str,
    /// What the name path parameter is.
    pub name: &'static str,
}

impl KindInfo {
    /// The admin URL of one resource (a CIDR's `/` percent-encoded).
    pub fn path(&self, name: &str) -> String {
        format!("{}/{}", self.base, name.replace('/', "%2F"))
    }
}

/// Code generic over a kind, called with each kind's type by [`each_kind`].
pub trait KindVisitor {
    fn visit<R: ResourceKind>(&mut self);
}

/// Declares the kinds, in dependency order: a kind names only kinds before it (a node names a
/// pool, a domain a pool). Creates and updates go in this order, deletes in reverse.
macro_rules! declare_kinds {
    ($($kind:ident),+ $(,)?) => {
        /// Every kind's [`KindInfo`], in dependency order.
        pub const KINDS: [KindInfo; [$(stringify!($kind)),+].len()] = [$(<$kind as ResourceKind>::INFO),+];

        /// Calls `visitor` with every kind's type, in [`KINDS`] order.
        pub fn each_kind(visitor: &mut impl KindVisitor) {
            $(visitor.visit::<$kind>();)+
        }
    };
}

declare_kinds!(Networks, Pools, Nodes, Domains, MirrorRules, ImageStyles, Accounts);

/// The [`KindInfo`] of `kind`.
pub fn info(kind: Kind) -> &'static KindInfo {
    // Every store kind has exactly one entry (`every_store_kind_has_one_entry_in_dependency_order`).
    KINDS.iter().find(|i| i.kind == kind).expect("every store kind is declared in KINDS")
}

/// Calls `visitor` with the type of `kind` alone.
pub fn with_kind(kind: Kind, visitor: &mut impl KindVisitor) {
    struct Only<'v, V> {
        kind: Kind,
        visitor: &'v mut V,
    }
    impl<V: KindVisitor> KindVisitor for Only<'_, V> {
        fn visit<R: ResourceKind>(&mut self) {
            if R::KIND == self.kind {
                self.visitor.visit::<R>();
            }
        }
    }
    each_kind(&mut Only { kind, visitor });
}

/// A body of `kind` as reads show it ([`ResourceKind::shown`]: secrets replaced), for code that
/// holds the kind as a value (`apply`'s plan, which must print and compare bodies without them).
pub fn shown(kind: Kind, body: serde_json::Value) -> serde_json::Value {
    struct Shown(Option<serde_json::Value>);
    impl KindVisitor for Shown {
        fn visit<R: ResourceKind>(&mut self) {
            self.0 = self.0.take().map(R::shown);
        }
    }
    let mut v = Shown(Some(body));
    with_kind(kind, &mut v);
    v.0.unwrap_or_default()
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
    /// Where the kind is wired; `INFO.kind` is `KIND`.
    const INFO: KindInfo;
    type Spec: Serialize + DeserializeOwned + Clone + Send + Sync;

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

#[derive(Debug)]
pub struct Networks;
#[derive(Debug)]
pub struct Nodes;
#[derive(Debug)]
pub struct Pools;
#[derive(Debug)]
pub struct Domains;
#[derive(Debug)]
pub struct Accounts;
/// Rules of the mirroring gateway.
#[derive(Debug)]
pub struct MirrorRules;
/// Named chains for `x-oss-process=style/<name>`.
#[derive(Debug)]
pub struct ImageStyles;

impl ResourceKind for Accounts {
    const KIND: Kind = Kind::Account;
    const INFO: KindInfo = KindInfo {
        kind: Kind::Account,
        section: "accounts",
        base: "/admin/v1/accounts",
        name_pattern: "{name}",
        name_field: "id",
        declarative: false,
        doc: KindDoc { schema: "AccountSpec", tag: "admin", name: "Account id (1 to 4294967295)" },
        example: ("4242", r#"{"secret": "kinds-secret"}"#),
    };
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
    const INFO: KindInfo = KindInfo {
        kind: Kind::Network,
        section: "networks",
        base: "/admin/v1/networks",
        name_pattern: "{*name}",
        name_field: "cidr",
        declarative: true,
        doc: KindDoc {
            schema: "NetworkSpec",
            tag: "admin",
            name: "CIDR with '/' percent-encoded (1.0.1.0%2F24)",
        },
        example: ("10.9.0.0/16", r#"{"isp": "telecom", "region": "beijing"}"#),
    };
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
    const INFO: KindInfo = KindInfo {
        kind: Kind::Node,
        section: "nodes",
        base: "/admin/v1/nodes",
        name_pattern: "{name}",
        name_field: "id",
        declarative: true,
        doc: KindDoc { schema: "NodeSpec", tag: "admin", name: "Node id" },
        example: (
            "kinds-node",
            r#"{"ip": "1.2.3.4", "pool": "kinds-pool", "isp": "telecom", "region": "beijing"}"#,
        ),
    };
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
    const INFO: KindInfo = KindInfo {
        kind: Kind::Pool,
        section: "pools",
        base: "/admin/v1/pools",
        name_pattern: "{name}",
        name_field: "name",
        declarative: true,
        doc: KindDoc { schema: "PoolSpec", tag: "admin", name: "Pool name" },
        example: ("kinds-pool", r#"{}"#),
    };
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
    const INFO: KindInfo = KindInfo {
        kind: Kind::Domain,
        section: "domains",
        base: "/admin/v1/domains",
        name_pattern: "{name}",
        name_field: "name",
        declarative: true,
        doc: KindDoc { schema: "DomainSpec", tag: "admin", name: "Domain name" },
        example: ("kinds.example.com", r#"{"pool": "kinds-pool", "ttl": 60}"#),
    };
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
    const INFO: KindInfo = KindInfo {
        kind: Kind::MirrorRule,
        section: "mirror_rules",
        base: "/admin/v1/mirror/rules",
        name_pattern: "{name}",
        name_field: "name",
        declarative: true,
        doc: KindDoc { schema: "RuleSpec", tag: "mirror", name: "Rule name" },
        example: ("kinds-rule", r#"{"path_prefix": "/kinds", "origin": "http://127.0.0.1:9/b"}"#),
    };
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
    const INFO: KindInfo = KindInfo {
        kind: Kind::ImageStyle,
        section: "image_styles",
        base: "/admin/v1/mirror/styles",
        name_pattern: "{name}",
        name_field: "name",
        declarative: true,
        doc: KindDoc {
            schema: "StyleSpec",
            tag: "mirror",
            name: "Style name (1 to 64 letters, digits, -, _, .)",
        },
        example: ("kinds-style", r#"{"process": "image/resize,w_100"}"#),
    };
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

    /// Each kind's type carries its own info, `each_kind` visits the types in `KINDS` order, and
    /// each example is a canonical name with a body that parses and validates.
    #[test]
    fn every_kind_type_is_declared_with_a_valid_example() {
        struct Check(Vec<Kind>);
        impl KindVisitor for Check {
            fn visit<R: ResourceKind>(&mut self) {
                assert_eq!(R::INFO.kind, R::KIND);
                assert_eq!(R::info(), &R::INFO);
                let (name, body) = R::INFO.example;
                assert_eq!(R::canonical_name(name).as_deref(), Ok(name), "{}", R::INFO.section);
                let spec: R::Spec = serde_json::from_str(body).expect(R::INFO.section);
                R::validate(&spec, &Validation::PERMISSIVE).expect(R::INFO.section);
                self.0.push(R::KIND);
            }
        }
        let mut seen = Check(Vec::new());
        each_kind(&mut seen);
        assert_eq!(seen.0, KINDS.map(|i| i.kind));
        for kind in Kind::ALL {
            let mut one = Check(Vec::new());
            with_kind(kind, &mut one);
            assert_eq!(one.0, [kind]);
        }
    }

    #[test]
    fn paths_encode_the_slash_of_a_cidr() {
        assert_eq!(info(Kind::Network).path("1.0.1.0/24"), "/admin/v1/networks/1.0.1.0%2F24");
        assert_eq!(info(Kind::MirrorRule).path("img"), "/admin/v1/mirror/rules/img");
    }
}
