use std::collections::HashMap;

use httpdns_core::Token;

/// Maps an autonomous system to an ISP token.
#[derive(Debug, Clone)]
pub struct IspMap {
    by_asn: HashMap<u32, Token>,
    /// Lowercase substrings of the AS organisation, tried in order when the number is unknown.
    by_org: Vec<(String, Token)>,
}

impl Default for IspMap {
    /// The shipped defaults for the Chinese carriers.
    fn default() -> Self {
        let t = |s: &str| Token::parse(s).expect("valid default token");
        let by_asn = [
            (4134, "telecom"), // CHINANET backbone
            (4812, "telecom"), // China Telecom (Group), Shanghai
            (4809, "telecom"), // CN2
            (4837, "unicom"),  // CHINA169 backbone
            (4808, "unicom"),  // China Unicom Beijing
            (9929, "unicom"),  // China Unicom industrial internet (CNCNET)
            (9808, "mobile"),  // China Mobile (Guangdong)
            (56040, "mobile"), // China Mobile Guangdong
            (4538, "cernet"),  // China Education and Research Network
        ]
        .into_iter()
        .map(|(asn, isp)| (asn, t(isp)))
        .collect();
        let by_org = [
            ("chinanet", "telecom"),
            ("china telecom", "telecom"),
            ("china169", "unicom"),
            ("china unicom", "unicom"),
            ("china mobile", "mobile"),
            ("cernet", "cernet"),
        ]
        .into_iter()
        .map(|(org, isp)| (org.to_owned(), t(isp)))
        .collect();
        Self { by_asn, by_org }
    }
}

impl IspMap {
    /// The defaults with `asn` and `org` entries added or overriding.
    pub fn with_overrides(
        asn: impl IntoIterator<Item = (u32, Token)>,
        org: impl IntoIterator<Item = (String, Token)>,
    ) -> Self {
        let mut map = Self::default();
        map.by_asn.extend(asn);
        // Operator entries are tried before the defaults.
        let mut by_org: Vec<(String, Token)> = org.into_iter().map(|(o, t)| (o.to_lowercase(), t)).collect();
        by_org.append(&mut map.by_org);
        map.by_org = by_org;
        map
    }

    pub fn isp(&self, asn: Option<u32>, organization: Option<&str>) -> Option<Token> {
        if let Some(isp) = asn.and_then(|a| self.by_asn.get(&a)) {
            return Some(isp.clone());
        }
        let org = organization?.to_lowercase();
        self.by_org.iter().find(|(needle, _)| org.contains(needle.as_str())).map(|(_, isp)| isp.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_carriers() {
        let m = IspMap::default();
        assert_eq!(m.isp(Some(4134), None).unwrap().as_str(), "telecom");
        assert_eq!(m.isp(Some(9929), None).unwrap().as_str(), "unicom");
        assert_eq!(m.isp(Some(56040), None).unwrap().as_str(), "mobile");
        assert_eq!(m.isp(Some(4538), None).unwrap().as_str(), "cernet");
        assert_eq!(m.isp(Some(1), Some("China Unicom Shanghai network")).unwrap().as_str(), "unicom");
        assert_eq!(m.isp(Some(15169), Some("GOOGLE")), None);
    }

    #[test]
    fn overrides_win() {
        let m = IspMap::with_overrides(
            [(4134, Token::parse("ct").unwrap())],
            [("google".to_owned(), Token::parse("goog").unwrap())],
        );
        assert_eq!(m.isp(Some(4134), None).unwrap().as_str(), "ct");
        assert_eq!(m.isp(None, Some("GOOGLE LLC")).unwrap().as_str(), "goog");
    }
}
