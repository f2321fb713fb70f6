use super::*;

#[test]
fn contract_body_parses_with_defaults() {
    let s: RuleSpec = serde_json::from_str(
        r#"{"path_prefix": "/image", "origin": "http://127.0.0.1:9000", "pass_query": false}"#,
    )
    .unwrap();
    s.validate().unwrap();
    assert_eq!(s.first_byte_timeout_ms, 10_000);
    assert!(!s.pass_query);
    assert!(s.check_md5);
}

#[test]
fn bad_specs_name_their_field() {
    let cases = [
        (serde_json::json!({"path_prefix": "image", "origin": "http://a"}), "path_prefix"),
        (serde_json::json!({"path_prefix": "/im/../x", "origin": "http://a"}), "path_prefix"),
        (serde_json::json!({"path_prefix": "/image/", "origin": "http://a"}), "path_prefix"),
        (serde_json::json!({"path_prefix": "/image", "origin": "ftp://a"}), "origin"),
        (serde_json::json!({"path_prefix": "/image", "origin": "http://u:p@a"}), "origin"),
        (serde_json::json!({"path_prefix": "/image", "origin": "http://a/?x=1"}), "origin"),
        (
            serde_json::json!({"path_prefix": "/i", "origin": "http://a", "backup_origin": "nope"}),
            "backup_origin",
        ),
        (
            serde_json::json!({"path_prefix": "/i", "origin": "http://a", "origin_query_params": ["v"]}),
            "origin_query_params",
        ),
        (
            serde_json::json!({"path_prefix": "/i", "origin": "http://a", "pass_query": true, "origin_query_params": ["x-oss-process"]}),
            "origin_query_params",
        ),
        (
            serde_json::json!({"path_prefix": "/i", "origin": "http://a", "idle_timeout_ms": 0}),
            "idle_timeout_ms",
        ),
        (
            serde_json::json!({"path_prefix": "/i", "origin": "http://a", "failover_statuses": [200]}),
            "failover_statuses",
        ),
        (
            serde_json::json!({"path_prefix": "/i", "origin": "http://a", "set_headers": {"Range": "bytes=0-"}}),
            "set_headers",
        ),
        (
            serde_json::json!({"path_prefix": "/i", "origin": "http://a", "probe_path": "health"}),
            "probe_path",
        ),
        // Slices: 1 MiB to 1 GiB, and only where copies are kept.
        (
            serde_json::json!({"path_prefix": "/i", "origin": "http://a", "slice_bytes": (1 << 20) - 1}),
            "slice_bytes",
        ),
        (
            serde_json::json!({"path_prefix": "/i", "origin": "http://a", "slice_bytes": (1u64 << 30) + 1}),
            "slice_bytes",
        ),
        (
            serde_json::json!({"path_prefix": "/i", "origin": "http://a", "slice_bytes": 1 << 20, "store": false}),
            "slice_bytes",
        ),
    ];
    for (body, field) in cases {
        let s: RuleSpec = serde_json::from_value(body.clone()).unwrap();
        let e = s.validate().expect_err(&body.to_string());
        assert_eq!(e.field, field, "{body}");
    }
}

#[test]
fn slices_at_the_bounds_are_valid() {
    for n in [1u64 << 20, 1 << 30] {
        let s: RuleSpec = serde_json::from_value(
            serde_json::json!({"path_prefix": "/v", "origin": "http://a", "slice_bytes": n}),
        )
        .unwrap();
        s.validate().unwrap();
        assert_eq!(s.slice_bytes, Some(n));
    }
}

#[test]
fn origins_in_priority_order() {
    let origins: Vec<OriginSpec> = serde_json::from_str(
        r#"[{"url": "http://c", "priority": 3}, {"url": "http://b", "priority": 1}, {"url": "http://b2", "priority": 1}]"#,
    )
    .unwrap();
    let urls: Vec<&str> = ordered("http://a", &origins, Some("http://z")).iter().map(|o| o.1).collect();
    assert_eq!(urls, ["http://a", "http://b", "http://b2", "http://c", "http://z"]);
    let urls: Vec<&str> = ordered("", &origins, None).iter().map(|o| o.1).collect();
    assert_eq!(urls, ["http://b", "http://b2", "http://c"]);
}

#[test]
fn the_secret_never_shows_in_debug() {
    let auth = OriginAuth {
        kind: "s3".into(),
        access_key_id: "AKID".into(),
        secret_access_key: "very-secret".into(),
        region: "us-east-1".into(),
    };
    assert!(!format!("{auth:?}").contains("very-secret"));
}
