use super::*;

fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
}

#[test]
fn defaults_match_the_contract() {
    let c = Config::load(None, |_| None).unwrap();
    assert_eq!(c.api_addr, Listen::At("127.0.0.1:8080".parse().unwrap()));
    assert_eq!(c.mirror_addr, Listen::At("127.0.0.1:8081".parse().unwrap()));
    assert_eq!(c.dns_addr, Listen::At("127.0.0.1:1053".parse().unwrap()));
    assert_eq!(c.data_dir, PathBuf::from("./data"));
    assert_eq!(c.database_url, "sqlite://./data/httpdns.db");
    assert!(!c.allow_private_node_ips);
    assert_eq!(c.upstreams, Upstreams::System);
    assert_eq!(c.policy.weights, Weights::default());
    assert!(c.mirror_sendfile);
}

#[test]
fn env_wins_over_file() {
    let file = r#"
            api_addr = "0.0.0.0:9000"
            dns_addr = "off"
            allow_private_node_ips = false
            upstreams = ["8.8.8.8"]
            [scoring]
            band = 0.05
            weights = { latency = 0.5, bandwidth = 0.2, load = 0.2, geo = 0.1 }
            [geoip.asn_isp]
            "AS64512" = "campus"
        "#;
    let c = Config::load(
        Some(file),
        env_of(&[
            ("HTTPDNS_API_ADDR", "127.0.0.1:0"),
            ("HTTPDNS_ALLOW_PRIVATE_NODE_IPS", "true"),
            ("HTTPDNS_UPSTREAMS", "1.1.1.1:53,9.9.9.9:5353"),
        ]),
    )
    .unwrap();
    assert_eq!(c.api_addr, Listen::At("127.0.0.1:0".parse().unwrap()));
    assert_eq!(c.dns_addr, Listen::Off);
    assert!(c.allow_private_node_ips && c.policy.allow_private);
    assert_eq!(
        c.upstreams,
        Upstreams::Servers(vec!["1.1.1.1:53".parse().unwrap(), "9.9.9.9:5353".parse().unwrap()])
    );
    let off = Config::load(None, env_of(&[("HTTPDNS_UPSTREAMS", "off")])).unwrap();
    assert_eq!(off.upstreams, Upstreams::Off);
    assert_eq!(c.policy.band, 0.05);
    assert_eq!(c.policy.weights.latency, 0.5);
    assert_eq!(c.geo.isp_map.isp(Some(64512), None).unwrap().as_str(), "campus");
    assert_eq!(c.geo.isp_map.isp(Some(4134), None).unwrap().as_str(), "telecom");
    let c = Config::load(None, env_of(&[("HTTPDNS_TRUSTED_PROXIES", "10.0.0.0/8, 192.168.1.1")])).unwrap();
    assert_eq!(c.trusted_proxies, ["10.0.0.0/8".parse().unwrap(), "192.168.1.1/32".parse().unwrap()]);
    let e = Config::load(None, env_of(&[("HTTPDNS_TRUSTED_PROXIES", "nope")])).unwrap_err();
    assert_eq!(e.setting, "HTTPDNS_TRUSTED_PROXIES");
    let file = "[mirror]\nsendfile = false";
    assert!(!Config::load(Some(file), |_| None).unwrap().mirror_sendfile);
    let on = Config::load(Some(file), env_of(&[("HTTPDNS_MIRROR_SENDFILE", "true")])).unwrap();
    assert!(on.mirror_sendfile);
    let e = Config::load(None, env_of(&[("HTTPDNS_MIRROR_SENDFILE", "sometimes")])).unwrap_err();
    assert_eq!(e.setting, "HTTPDNS_MIRROR_SENDFILE");
}

#[test]
fn bad_settings_are_named() {
    let e = Config::load(None, env_of(&[("HTTPDNS_API_ADDR", "localhost")])).unwrap_err();
    assert_eq!(e.setting, "HTTPDNS_API_ADDR");
    let e = Config::load(None, env_of(&[("HTTPDNS_UPSTREAMS", "1.1.1.1,nope")])).unwrap_err();
    assert_eq!(e.setting, "HTTPDNS_UPSTREAMS");
    let e = Config::load(None, env_of(&[("HTTPDNS_ALLOW_PRIVATE_NODE_IPS", "maybe")])).unwrap_err();
    assert_eq!(e.setting, "HTTPDNS_ALLOW_PRIVATE_NODE_IPS");
    let e = Config::load(None, env_of(&[("HTTPDNS_ADMIN_TOKEN", "short")])).unwrap_err();
    assert_eq!(e.setting, "HTTPDNS_ADMIN_TOKEN");
    let e = Config::load(Some("bogus = 1"), |_| None).unwrap_err();
    assert_eq!(e.setting, "config file");
    let e =
        Config::load(Some("[scoring]\nweights = { latency = -1, bandwidth = 0, load = 0, geo = 0 }"), |_| {
            None
        })
        .unwrap_err();
    assert_eq!(e.setting, "scoring.weights.latency");
}

#[test]
fn placeholder_secrets_are_refused_by_name_unless_demo() {
    let cases: &[(&str, &str, &str)] = &[
        ("HTTPDNS_ADMIN_TOKEN", "change-me-admin-token-0123456789", "HTTPDNS_ADMIN_TOKEN"),
        (
            "HTTPDNS_CONFIG_SIGNING_KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            "HTTPDNS_CONFIG_SIGNING_KEY",
        ),
        ("HTTPDNS_CONFIG_SIGNING_KEY", "change-me-config-signing-key", "HTTPDNS_CONFIG_SIGNING_KEY"),
        (
            "HTTPDNS_DATABASE_URL",
            "postgres://httpdns:change-me-postgres@postgres:5432/httpdns",
            "HTTPDNS_DATABASE_URL",
        ),
        ("AWS_SECRET_ACCESS_KEY", "change-me-minio", "AWS_SECRET_ACCESS_KEY"),
    ];
    for (key, value, named) in cases {
        let one = |k: &str| (k == *key).then(|| (*value).to_owned());
        let e = Config::load(None, one).unwrap_err();
        assert_eq!(e.setting, *named, "{key}={value}");
        assert!(e.message.contains("HTTPDNS_ALLOW_DEMO_SECRETS"), "{e}");
        let demo = |k: &str| match k {
            "HTTPDNS_ALLOW_DEMO_SECRETS" => Some("true".to_owned()),
            _ => one(k),
        };
        match Config::load(None, demo) {
            Ok(c) => assert_eq!(c.demo_secrets, [*named]),
            // Demo mode accepts a placeholder, not a malformed key.
            Err(e) => assert!(value.starts_with("change-me") && e.message.contains("base64"), "{e}"),
        }
    }
    // Every placeholder at once: the first is named, the others listed.
    let all = env_of(&[
        ("HTTPDNS_ADMIN_TOKEN", "change-me-admin-token-0123456789"),
        ("AWS_SECRET_ACCESS_KEY", "change-me-minio"),
    ]);
    let e = Config::load(None, all).unwrap_err();
    assert_eq!(e.setting, "HTTPDNS_ADMIN_TOKEN");
    assert!(e.message.contains("AWS_SECRET_ACCESS_KEY"), "{e}");
    // The file's secrets are checked too, and real secrets pass.
    let e = Config::load(Some("admin_token = \"change-me-to-a-long-random-string\""), |_| None).unwrap_err();
    assert_eq!(e.setting, "HTTPDNS_ADMIN_TOKEN");
    let ok = env_of(&[
        ("HTTPDNS_ADMIN_TOKEN", "3f9a0c77e1d24b6c8a5e0d1f"),
        ("HTTPDNS_DATABASE_URL", "postgres://httpdns:s3cr3t-x@db:5432/httpdns"),
        ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI"),
    ]);
    assert!(Config::load(None, ok).unwrap().demo_secrets.is_empty());
}
