//! The LocalDNS comparison: a sampled share of service answers asked of LocalDNS too, for the
//! hijack map.

use std::net::IpAddr;

use super::Resolver;
use crate::events::ClientEvent;

impl Resolver {
    /// For a sampled share of service answers, asks LocalDNS too, on a task of its own (the
    /// app's request never waits for it), and reports both answers for the LocalDNS map.
    pub(super) fn maybe_compare(&self, name: &str, httpdns: &[IpAddr]) {
        let Some(reporter) = self.inner.events.get() else { return };
        if httpdns.is_empty() || !crate::events::sampled(reporter.options().localdns_sample_rate) {
            return;
        }
        let (reporter, local, timeout) =
            (reporter.clone(), self.inner.opts.local_dns.clone(), self.inner.opts.local_timeout);
        let (name, httpdns) = (name.to_owned(), httpdns.to_vec());
        tokio::spawn(async move {
            // A LocalDNS that does not answer says nothing about what it would have answered.
            if let Ok(mut localdns) = local.lookup(&name, timeout).await {
                // The server takes at most 32 addresses a side: a long answer must not get
                // the whole batch refused.
                localdns.truncate(crate::events::MAX_COMPARE_IPS);
                let mut httpdns = httpdns;
                httpdns.truncate(crate::events::MAX_COMPARE_IPS);
                reporter.record(ClientEvent::LocalDnsCompare { host: name, localdns, httpdns });
            }
        });
    }
}
