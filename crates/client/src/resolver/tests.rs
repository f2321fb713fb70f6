use super::*;

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
fn filter_drops_invalid_private_and_foreign_carrier_nodes() {
    let all = ips(&[
        "0.0.0.0",
        "127.0.0.1",
        "10.1.2.3",
        "192.168.1.1",
        "169.254.169.254",
        "224.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "1.1.1.1",
        "2.2.2.2",
        "2402:4e00::1",
    ]);
    let labels: HashMap<IpAddr, String> = [("1.1.1.1", "telecom"), ("2.2.2.2", "unicom")]
        .iter()
        .map(|(i, l)| (i.parse().unwrap(), l.to_string()))
        .collect();
    let (kept, dropped) = filter(&all, false, Some("unicom"), &labels);
    // Unlabelled public addresses stay: the filter acts on labels only where they exist.
    assert_eq!(kept, ips(&["2.2.2.2", "2402:4e00::1"]));
    assert_eq!(dropped.len(), 12);
    assert!(dropped.contains(&("1.1.1.1".parse().unwrap(), "node of another carrier")));
    // Intranet mode keeps private ones, never the unroutable.
    let (kept, _) = filter(&all, true, None, &labels);
    assert!(kept.contains(&"10.1.2.3".parse().unwrap()) && kept.contains(&"127.0.0.1".parse().unwrap()));
    assert!(!kept.contains(&"0.0.0.0".parse().unwrap()) && !kept.contains(&"::".parse().unwrap()));
}

#[tokio::test]
async fn literals_bypass_and_bad_names_are_errors() {
    let r = Resolver::new(ResolverOptions::default());
    let lit = r.resolve("127.0.0.1").await.unwrap();
    assert_eq!((lit.path, lit.ips), (Path::Literal, ips(&["127.0.0.1"])));
    assert!(matches!(r.resolve("a..b").await, Err(Error::InvalidInput(_))));
}
